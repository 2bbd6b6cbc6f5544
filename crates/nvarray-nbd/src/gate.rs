//! Who may start a handshake: a budget per peer, so that no one peer can hold the handshake
//! slots that every new client needs.
//!
//! A connection in its handshake holds a slot until it chooses the export or is closed (after
//! `HANDSHAKE_IDLE` of silence). With one pool for everyone, 64 silent connections from one
//! address shut every other client out, and one address reopening 22 sockets a second kept
//! them out for good. So:
//!
//! - a peer has at most `HANDSHAKES_PER_PEER_MAX` handshakes in progress;
//! - `HANDSHAKES_RESERVED` of the `HANDSHAKES_MAX` slots are kept for peers with none in
//!   progress, so a new peer gets one however many busy peers there are;
//! - a connection beyond its peer's budget waits for a slot (a real client opening many
//!   connections at once, as fio with `numjobs` does, finishes each handshake in
//!   microseconds), at most `HANDSHAKE_IDLE`, and only while fewer than
//!   `HANDSHAKES_WAITING_MAX` wait (`HANDSHAKES_WAITING_PER_PEER_MAX` of one peer's); beyond
//!   that it is closed at once. Either way the server's log says why, at most once a second
//!   with a count of the others.
//!
//! A peer is a TCP client's address (an IPv6 client's /64 network, which one host usually
//! has whole, so that it cannot take a fresh address per connection) or a Unix-socket
//! client's user id.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::io::Stream;

/// Connections in the handshake at once, all peers together.
pub const HANDSHAKES_MAX: usize = 64;
/// Connections of one peer in the handshake at once.
pub const HANDSHAKES_PER_PEER_MAX: usize = 16;
/// Slots only a peer with no handshake in progress may take.
pub const HANDSHAKES_RESERVED: usize = 16;
/// Connections waiting for their peer's budget, all peers together, and of one peer. With
/// the per-peer budget, one peer may have as many connections opening at once as every peer
/// together could before budgets existed (`HANDSHAKES_MAX`).
pub const HANDSHAKES_WAITING_MAX: usize = 64;
pub const HANDSHAKES_WAITING_PER_PEER_MAX: usize = HANDSHAKES_MAX - HANDSHAKES_PER_PEER_MAX;

/// Lines about refused connections: at most one per this long, counting the others.
const REFUSALS_LOG_EVERY: Duration = Duration::from_secs(1);

const _: () = assert!(HANDSHAKES_PER_PEER_MAX + HANDSHAKES_RESERVED <= HANDSHAKES_MAX);
const _: () = assert!(HANDSHAKES_WAITING_PER_PEER_MAX <= HANDSHAKES_WAITING_MAX);

/// Whom a connection's handshake is charged to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// An IPv4 address, or an IPv6 one with its last 64 bits cleared.
    Ip(IpAddr),
    /// A Unix-socket client's user id.
    User(u32),
    /// A peer whose address or credentials could not be read.
    Unknown,
}

impl Peer {
    pub fn of(stream: &Stream) -> Peer {
        match stream {
            Stream::Tcp(s) => s
                .peer_addr()
                .map_or(Peer::Unknown, |a| Peer::from_ip(a.ip())),
            Stream::Unix(s) => {
                nvarray_sys::peer::peer_credentials(s).map_or(Peer::Unknown, |c| Peer::User(c.uid))
            }
            // Simulated clients do not pass the gate.
            Stream::Memory(_) => Peer::Unknown,
        }
    }

    pub fn from_ip(ip: IpAddr) -> Peer {
        match ip {
            IpAddr::V4(v4) => Peer::Ip(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer::Ip(IpAddr::V4(v4)),
                None => {
                    let network = u128::from(v6) & !((1u128 << 64) - 1);
                    Peer::Ip(IpAddr::V6(network.into()))
                }
            },
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Ip(IpAddr::V6(net)) => write!(f, "{net}/64"),
            Peer::Ip(ip) => write!(f, "{ip}"),
            Peer::User(uid) => write!(f, "Unix-socket user {uid}"),
            Peer::Unknown => f.write_str("an unknown peer"),
        }
    }
}

/// What the accept loop does with a new connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// It holds a handshake slot: start the handshake.
    Now,
    /// Its peer is over its budget: wait for a slot (`Gate::wait_turn`).
    Wait,
    /// Close it at once; the reason is for the log.
    Refuse(String),
}

#[derive(Default)]
struct PeerCount {
    in_progress: usize,
    waiting: usize,
}

#[derive(Default)]
struct GateState {
    in_progress: usize,
    waiting: usize,
    peers: HashMap<Peer, PeerCount>,
    closing: bool,
    /// Refusals not logged yet, and when the last line was.
    refusals_unlogged: u64,
    refusals_logged_at: Option<Instant>,
}

impl GateState {
    fn may_start(&self, peer: &Peer) -> bool {
        let mine = self.peers.get(peer).map_or(0, |p| p.in_progress);
        let limit = if mine == 0 {
            HANDSHAKES_MAX
        } else {
            HANDSHAKES_MAX - HANDSHAKES_RESERVED
        };
        mine < HANDSHAKES_PER_PEER_MAX && self.in_progress < limit
    }

    fn start(&mut self, peer: &Peer) {
        self.in_progress += 1;
        let mine = &mut self.peers.entry(peer.clone()).or_default().in_progress;
        *mine += 1;
        // The budgets the gate exists for (`may_start` is asked first).
        debug_assert!(
            *mine <= HANDSHAKES_PER_PEER_MAX,
            "{peer}'s handshakes: expected at most {HANDSHAKES_PER_PEER_MAX}, found {mine}"
        );
        debug_assert!(
            self.in_progress <= HANDSHAKES_MAX,
            "handshakes in progress: expected at most {HANDSHAKES_MAX}, found {}",
            self.in_progress
        );
    }

    /// Forgets a peer with nothing in progress or waiting (the map stays as small as the
    /// connections opening now).
    fn tidy(&mut self, peer: &Peer) {
        if self
            .peers
            .get(peer)
            .is_some_and(|p| p.in_progress == 0 && p.waiting == 0)
        {
            self.peers.remove(peer);
        }
    }
}

/// The handshake budgets of one server.
#[derive(Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

impl Gate {
    fn state(&self) -> MutexGuard<'_, GateState> {
        // The state is counters only, changed in whole steps: usable after a panic elsewhere.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides at once what becomes of a new connection from `peer`.
    pub fn admit(&self, peer: &Peer) -> Admission {
        let mut s = self.state();
        if s.may_start(peer) {
            s.start(peer);
            return Admission::Now;
        }
        let (mine, waiting) = s
            .peers
            .get(peer)
            .map_or((0, 0), |p| (p.in_progress, p.waiting));
        if s.waiting < HANDSHAKES_WAITING_MAX && waiting < HANDSHAKES_WAITING_PER_PEER_MAX {
            s.waiting += 1;
            s.peers.entry(peer.clone()).or_default().waiting += 1;
            debug_assert!(
                s.waiting <= HANDSHAKES_WAITING_MAX,
                "connections waiting for a handshake: expected at most {HANDSHAKES_WAITING_MAX}, \
                 found {}",
                s.waiting
            );
            return Admission::Wait;
        }
        Admission::Refuse(if waiting >= HANDSHAKES_WAITING_PER_PEER_MAX {
            format!(
                "{peer} already has {mine} handshakes in progress and {waiting} waiting \
                 (at most {HANDSHAKES_PER_PEER_MAX} and {HANDSHAKES_WAITING_PER_PEER_MAX} per \
                 peer)"
            )
        } else {
            format!(
                "{} handshakes in progress and {} waiting from all peers (at most \
                 {HANDSHAKES_MAX} and {HANDSHAKES_WAITING_MAX})",
                s.in_progress, s.waiting
            )
        })
    }

    /// For a connection admitted to `Wait`: waits until its peer may start a handshake, at
    /// most until `deadline`, or until the server closes. `Err` says why it gave up.
    pub fn wait_turn(&self, peer: &Peer, deadline: Instant) -> Result<(), String> {
        let mut s = self.state();
        let outcome = loop {
            if s.closing {
                break Err("the server is shutting down".to_string());
            }
            if s.may_start(peer) {
                s.start(peer);
                break Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let mine = s.peers.get(peer).map_or(0, |p| p.in_progress);
                break Err(format!(
                    "waited {} s for a handshake slot: {peer} has {mine} handshakes in \
                     progress (at most {HANDSHAKES_PER_PEER_MAX} per peer), {} in all (at most \
                     {HANDSHAKES_MAX})",
                    HANDSHAKE_WAIT.as_secs(),
                    s.in_progress
                ));
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        s.waiting -= 1;
        if let Some(p) = s.peers.get_mut(peer) {
            p.waiting -= 1;
        }
        s.tidy(peer);
        outcome
    }

    /// A handshake of `peer` is over (admitted `Now`, or after `wait_turn` succeeded).
    pub fn done(&self, peer: &Peer) {
        let mut s = self.state();
        debug_assert!(
            s.peers.get(peer).is_some_and(|p| p.in_progress > 0),
            "a handshake of {peer} ends: expected one in progress, found none"
        );
        s.in_progress -= 1;
        if let Some(p) = s.peers.get_mut(peer) {
            p.in_progress -= 1;
        }
        s.tidy(peer);
        drop(s);
        self.changed.notify_all();
    }

    /// Wakes every waiting connection to close: the server is shutting down.
    pub fn close(&self) {
        self.state().closing = true;
        self.changed.notify_all();
    }

    /// Counts a refusal; returns the line to log, if one is due (`REFUSALS_LOG_EVERY`),
    /// with how many refusals it stands for.
    pub fn refusal_to_log(&self, now: Instant) -> Option<u64> {
        let mut s = self.state();
        s.refusals_unlogged += 1;
        let due = s
            .refusals_logged_at
            .is_none_or(|at| now.saturating_duration_since(at) >= REFUSALS_LOG_EVERY);
        if !due {
            return None;
        }
        s.refusals_logged_at = Some(now);
        Some(std::mem::take(&mut s.refusals_unlogged))
    }

    /// Handshakes in progress and connections waiting, all peers together.
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state();
        (s.in_progress, s.waiting)
    }
}

/// How long a connection beyond its peer's budget waits for a slot: as long as a silent
/// handshake may last, after which one of the peer's own would have been closed.
pub const HANDSHAKE_WAIT: Duration = crate::handshake::HANDSHAKE_IDLE;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ip(a: u8) -> Peer {
        Peer::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, a)))
    }

    #[test]
    fn one_peer_never_holds_every_slot_and_a_new_peer_always_gets_one() {
        let gate = Gate::default();
        let flood = ip(1);
        for _ in 0..HANDSHAKES_PER_PEER_MAX {
            assert_eq!(gate.admit(&flood), Admission::Now);
        }
        // Over its budget: it waits, then is refused once its waiting share is used.
        for _ in 0..HANDSHAKES_WAITING_PER_PEER_MAX {
            assert_eq!(gate.admit(&flood), Admission::Wait);
        }
        assert!(matches!(gate.admit(&flood), Admission::Refuse(m) if m.contains("10.0.0.1")));
        // Busy peers together stop short of the reserve: peers 2 and 3 fill the slots up to
        // it, and peer 4 gets only its first handshake, from the reserve.
        for a in 2..=4 {
            for _ in 0..HANDSHAKES_PER_PEER_MAX {
                gate.admit(&ip(a));
            }
        }
        let (in_progress, _) = gate.counts();
        assert_eq!(in_progress, HANDSHAKES_MAX - HANDSHAKES_RESERVED + 1);
        // A peer with nothing in progress still starts at once.
        assert_eq!(gate.admit(&ip(9)), Admission::Now);
    }

    #[test]
    fn a_waiting_connection_starts_when_its_peer_finishes_one_and_gives_up_at_its_deadline() {
        let gate = Gate::default();
        let peer = ip(1);
        for _ in 0..HANDSHAKES_PER_PEER_MAX {
            assert_eq!(gate.admit(&peer), Admission::Now);
        }
        assert_eq!(gate.admit(&peer), Admission::Wait);
        assert!(gate
            .wait_turn(&peer, Instant::now())
            .is_err_and(|m| m.contains("waited")));
        assert_eq!(gate.counts(), (HANDSHAKES_PER_PEER_MAX, 0));
        assert_eq!(gate.admit(&peer), Admission::Wait);
        std::thread::scope(|s| {
            let waiter =
                s.spawn(|| gate.wait_turn(&peer, Instant::now() + Duration::from_secs(60)));
            gate.done(&peer);
            assert_eq!(waiter.join().unwrap(), Ok(()));
        });
        assert_eq!(gate.counts(), (HANDSHAKES_PER_PEER_MAX, 0));
        for _ in 0..HANDSHAKES_PER_PEER_MAX {
            gate.done(&peer);
        }
        assert_eq!(gate.counts(), (0, 0));
        assert!(
            gate.state().peers.is_empty(),
            "peers are forgotten when idle"
        );
    }

    #[test]
    fn shutdown_wakes_the_waiting() {
        let gate = Gate::default();
        let peer = ip(1);
        for _ in 0..HANDSHAKES_PER_PEER_MAX {
            gate.admit(&peer);
        }
        assert_eq!(gate.admit(&peer), Admission::Wait);
        std::thread::scope(|s| {
            let waiter =
                s.spawn(|| gate.wait_turn(&peer, Instant::now() + Duration::from_secs(60)));
            gate.close();
            assert!(waiter
                .join()
                .unwrap()
                .is_err_and(|m| m.contains("shutting down")));
        });
    }

    #[test]
    fn peers_are_addresses_and_ipv6_networks() {
        let a: Ipv6Addr = "2001:db8:1:2:aaaa:bbbb:cccc:dddd".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
        assert_eq!(Peer::from_ip(a.into()), Peer::from_ip(b.into()));
        assert_eq!(Peer::from_ip(a.into()).to_string(), "2001:db8:1:2::/64");
        let mapped: Ipv6Addr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Peer::from_ip(mapped.into()), ip(1));
        assert_ne!(ip(1), ip(2));
    }

    #[test]
    fn refusals_are_logged_at_most_once_a_second_with_a_count() {
        let gate = Gate::default();
        let t = Instant::now();
        assert_eq!(gate.refusal_to_log(t), Some(1));
        assert_eq!(gate.refusal_to_log(t + Duration::from_millis(10)), None);
        assert_eq!(gate.refusal_to_log(t + Duration::from_millis(20)), None);
        assert_eq!(gate.refusal_to_log(t + REFUSALS_LOG_EVERY), Some(3));
    }
}
