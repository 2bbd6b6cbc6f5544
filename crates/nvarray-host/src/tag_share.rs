//! Fair shares of the device's tags among a server's clients: NBD connections, user-space
//! channels (each a "connection" below).
//!
//! Every connection's commands draw on the device's one tag pool (Moneta has 64 tags). Left
//! alone, a client at a deep queue depth re-takes each tag the moment it frees, and a second
//! client waits behind it for every command it issues. So a connection that has commands to
//! issue or in flight is *active*, and an active connection issues a new command only while it
//! holds fewer than its share, `max(SHARE_MIN, ceil(tags / active connections))`, of the tags.
//! An idle connection counts for nothing: a lone client borrows every tag, and when another
//! becomes active the first simply stops taking new tags above its share until its commands
//! complete and give them back. Linux's blk-mq shares a host's tags among its active queues
//! the same way.
//!
//! The cost on the issue path is one relaxed load per command, plus one atomic add when a
//! connection turns active or idle (at queue depth 1, twice per request).

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The smallest share: a connection may always keep this many commands in flight (fewer only
/// if the device has fewer tags), so that many active connections still each pipeline.
pub const SHARE_MIN: usize = 4;

/// The tags of one device and how many connections are using them.
#[derive(Debug)]
pub struct TagShare {
    tags: usize,
    active: AtomicUsize,
}

impl TagShare {
    pub fn new(tags: usize) -> TagShare {
        TagShare {
            tags,
            active: AtomicUsize::new(0),
        }
    }

    /// How many tags each active connection may hold now.
    pub fn limit(&self) -> usize {
        let active = self.active.load(Ordering::Relaxed).max(1);
        let limit = self.tags.div_ceil(active).max(SHARE_MIN.min(self.tags));
        // Never a share above the device's tags, and never none: a connection can always
        // issue (and so finish) its next command.
        debug_assert!(
            limit <= self.tags,
            "tag share above the device's tags: expected at most {}, found {limit} ({active} \
             active)",
            self.tags
        );
        debug_assert!(
            limit >= 1 || self.tags == 0,
            "tag share of none: expected at least 1 of {} tags, found {limit} ({active} active)",
            self.tags
        );
        limit
    }

    /// The device's tags.
    pub fn tags(&self) -> usize {
        self.tags
    }

    /// Connections active now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// A place for one connection, idle until it says otherwise.
    pub fn seat(&self) -> Seat<&TagShare> {
        Seat::new(self)
    }
}

/// One connection's standing in a `TagShare` (held by reference or shared ownership); idle
/// again when dropped.
#[derive(Debug)]
pub struct Seat<S: Deref<Target = TagShare>> {
    share: S,
    active: bool,
}

impl<S: Deref<Target = TagShare>> Seat<S> {
    pub fn new(share: S) -> Seat<S> {
        Seat {
            share,
            active: false,
        }
    }

    pub fn share(&self) -> &TagShare {
        &self.share
    }

    /// Whether a connection with `in_flight` commands may issue another; counts it active.
    pub fn may_issue(&mut self, in_flight: usize) -> bool {
        if !self.active {
            self.active = true;
            self.share.active.fetch_add(1, Ordering::Relaxed);
        }
        in_flight < self.share.limit()
    }

    /// The connection has nothing to issue and nothing in flight.
    pub fn idle(&mut self) {
        if self.active {
            self.active = false;
            let before = self.share.active.fetch_sub(1, Ordering::Relaxed);
            // Each seat counts itself once while active.
            debug_assert!(
                before > 0,
                "active connections: expected at least this one, found {before}"
            );
        }
    }
}

impl<S: Deref<Target = TagShare>> Drop for Seat<S> {
    fn drop(&mut self) {
        self.idle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_connection_borrows_every_tag_and_gives_back_as_others_arrive() {
        let share = TagShare::new(64);
        let mut a = share.seat();
        assert!(a.may_issue(63));
        assert!(!a.may_issue(64));
        let mut b = share.seat();
        assert!(b.may_issue(0));
        assert_eq!(share.active(), 2);
        assert!(!a.may_issue(32), "a holds its half");
        assert!(a.may_issue(31));
        let mut c = share.seat();
        assert!(c.may_issue(0));
        assert_eq!(share.limit(), 22, "ceil(64 / 3)");
        b.idle();
        c.idle();
        assert_eq!(share.limit(), 64);
        drop(a);
        assert_eq!(share.active(), 0);
        assert!(b.may_issue(0));
        drop(b);
        drop(c);
        assert_eq!(share.active(), 0);
    }

    #[test]
    fn many_connections_still_get_the_minimum_and_a_tiny_device_its_tags() {
        let share = TagShare::new(64);
        let mut seats: Vec<_> = (0..100).map(|_| share.seat()).collect();
        for s in &mut seats {
            assert!(s.may_issue(0));
        }
        assert_eq!(share.limit(), SHARE_MIN);
        assert!(seats[0].may_issue(SHARE_MIN - 1));
        assert!(!seats[0].may_issue(SHARE_MIN));
        let tiny = TagShare::new(2);
        let (mut x, mut y) = (tiny.seat(), tiny.seat());
        assert!(x.may_issue(0) && y.may_issue(0));
        assert_eq!(tiny.limit(), 2, "never a share above the device's tags");
    }
}
