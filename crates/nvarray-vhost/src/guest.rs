//! One connected virtual machine as the back end's virtqueues share it: its session in the
//! server's statistics (a stream per guest in the report), its counts of refused and failed
//! requests, and where its messages go.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use nvarray_run::served::Session;

use crate::virtio_blk::ID_BYTES;

/// Messages about one guest beyond this many are counted, not printed: a guest that sends
/// nothing but malformed chains must not flood the server's log.
const MESSAGES_MAX: u64 = 16;

/// A log line's destination.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

pub struct Guest {
    /// Who it is, for messages and its stream in the report: `guest N`, the Nth VMM served
    /// on the socket.
    pub name: String,
    pub read_only: bool,
    session: Session,
    begun: AtomicBool,
    refused: AtomicU64,
    failed: AtomicU64,
    messages: AtomicU64,
    id: [u8; ID_BYTES],
    log: Log,
}

/// What a guest came to, when it has gone.
pub struct Ended {
    pub session: Session,
    /// Whether it sent any request (a session that sent none is discarded).
    pub begun: bool,
    pub refused: u64,
    pub failed: u64,
}

impl Guest {
    pub fn new(name: String, read_only: bool, session: Session, serial: &str, log: Log) -> Guest {
        let mut id = [0u8; ID_BYTES];
        let n = serial.len().min(ID_BYTES);
        id[..n].copy_from_slice(&serial.as_bytes()[..n]);
        Guest {
            name,
            read_only,
            session,
            begun: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            id,
            log,
        }
    }

    /// The disk's serial number (GET_ID), NUL-padded to 20 bytes as virtio-blk has it.
    pub fn id(&self) -> [u8; ID_BYTES] {
        self.id
    }

    /// A request has started: the session begins with the guest's first.
    pub fn begin_at(&self, now: Instant) {
        if !self.begun.load(Ordering::Relaxed) && !self.begun.swap(true, Ordering::AcqRel) {
            self.session.begin_at(now);
        }
    }

    /// Records answered requests (read, bytes, latency ns) under one lock, and empties the list.
    pub fn record(&self, answered: &mut Vec<(bool, u32, u64)>) {
        if answered.is_empty() {
            return;
        }
        let mut stats = self.session.stats.lock().unwrap_or_else(|e| e.into_inner());
        for &(read, len, ns) in answered.iter() {
            stats.record_host(read, len, ns);
        }
        answered.clear();
    }

    /// A request failed `request::parse`.
    pub fn refused(&self, why: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.log(&format!("request refused: {why}"));
    }

    /// A request's device command failed (or its data could not be moved).
    pub fn count_failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Prints `message` about this guest, unless it has had its share of messages.
    pub fn log(&self, message: &str) {
        let n = self.messages.fetch_add(1, Ordering::Relaxed);
        if n < MESSAGES_MAX {
            (self.log)(&format!("{}: {message}", self.name));
        } else if n == MESSAGES_MAX {
            (self.log)(&format!(
                "{}: further messages only counted (see its line at disconnection)",
                self.name
            ));
        }
    }

    /// Ends the guest's session (its virtqueues are all idle and dropped).
    pub fn end(self) -> Ended {
        let begun = self.begun.load(Ordering::Acquire);
        if begun {
            self.session.end();
        }
        Ended {
            session: self.session,
            begun,
            refused: self.refused.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}
