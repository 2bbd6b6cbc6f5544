//! `ServedStats`: the statistics of a device that front ends serve to clients (NBD
//! connections, user-space channels), one stream per client (a host, a process), and the
//! device report built from them.
//!
//! A client's session is recorded in its own `StreamStats` while it lasts and merged into its
//! stream's record of ended sessions when it closes. Rates are over active time: the whole's
//! over the server's (`BusyClock`: some session between its first request and its close, and
//! short gaps), each stream's over its own sessions only, so two clients served one after the
//! other each show their own rate, not half of it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use nvarray_host::Device;
use nvarray_report::{process_cpu_seconds, BusyClock, RunReport, StreamStats};

/// One client session's statistics and its clocks.
pub struct Session {
    id: u64,
    name: String,
    pub stats: Arc<Mutex<StreamStats>>,
    /// The server's active time, which every session's requests extend.
    pub busy: Arc<BusyClock>,
    /// The active time of this session's stream (its sessions only).
    pub stream_busy: Arc<BusyClock>,
}

impl Session {
    /// The session's first request has started: begins it on both clocks.
    pub fn begin_at(&self, started: Instant) {
        self.busy.begin_at(started);
        self.stream_busy.begin_at(started);
    }

    /// Ends a begun session on both clocks.
    pub fn end(&self) {
        self.busy.end();
        self.stream_busy.end();
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Every session's statistics, live and ended, by stream.
pub struct ServedStats {
    live: Mutex<Vec<(u64, Arc<Mutex<StreamStats>>)>>,
    ended: Mutex<BTreeMap<String, StreamStats>>,
    busy: Arc<BusyClock>,
    stream_busy: Mutex<BTreeMap<String, Arc<BusyClock>>>,
    next_id: Mutex<u64>,
    started: Instant,
    cpu_start: f64,
}

impl Default for ServedStats {
    fn default() -> Self {
        Self::new()
    }
}

/// The live sessions, locked.
type LiveList<'a> = MutexGuard<'a, Vec<(u64, Arc<Mutex<StreamStats>>)>>;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Statistics stay readable after a panic elsewhere: they are counts, never half-updated
    // in a way a report could not show.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ServedStats {
    pub fn new() -> Self {
        ServedStats {
            live: Mutex::new(Vec::new()),
            ended: Mutex::new(BTreeMap::new()),
            busy: Arc::new(BusyClock::new()),
            stream_busy: Mutex::new(BTreeMap::new()),
            next_id: Mutex::new(0),
            started: Instant::now(),
            cpu_start: process_cpu_seconds(),
        }
    }

    /// Opens a session of the stream `name` (a client host, a process).
    pub fn open(&self, name: &str) -> Session {
        let id = {
            let mut next = locked(&self.next_id);
            *next += 1;
            *next
        };
        let stats = Arc::new(Mutex::new(StreamStats::new(name)));
        locked(&self.live).push((id, Arc::clone(&stats)));
        Session {
            id,
            name: name.to_string(),
            stats,
            busy: Arc::clone(&self.busy),
            stream_busy: Arc::clone(
                locked(&self.stream_busy)
                    .entry(name.to_string())
                    .or_default(),
            ),
        }
    }

    /// Closes a session: its figures join its stream's ended ones.
    pub fn close(&self, session: Session) {
        // Under the live list's lock (see `report`), so the figures count exactly once.
        let _live = self.take_live(&session, "closed");
        locked(&self.ended)
            .entry(session.name.clone())
            .or_insert_with(|| StreamStats::new(&session.name))
            .merge(&locked(&session.stats));
    }

    /// Forgets a session that never sent a request (a client that only looked at the device,
    /// as fio's parent does to learn its size): it would be an empty stream in the report.
    pub fn discard(&self, session: Session) {
        drop(self.take_live(&session, "was discarded"));
    }

    /// Takes `session` off the live list, which held it exactly once, and returns the list
    /// still locked.
    fn take_live(&self, session: &Session, event: &str) -> LiveList<'_> {
        let mut live = locked(&self.live);
        let before = live.len();
        live.retain(|(i, _)| *i != session.id);
        assert_eq!(
            live.len() + 1,
            before,
            "session {} was not live once when it {event}",
            session.id
        );
        live
    }

    /// The device report so far: one stream per client name (`empty`, with nothing in it,
    /// when no client has come), rates over active time, and the server's uptime.
    pub fn report(&self, device: &Device, empty: &str) -> RunReport {
        let mut streams: BTreeMap<String, StreamStats> = BTreeMap::new();
        let mut add = |s: &StreamStats| {
            streams
                .entry(s.name.clone())
                .or_insert_with(|| StreamStats::new(&s.name))
                .merge(s);
        };
        // Live ones first, under their list's lock, so a session closing meanwhile (moved from
        // the list to the ended record under the same lock) is counted exactly once.
        let live = locked(&self.live);
        for (_, s) in live.iter() {
            add(&locked(s));
        }
        for s in locked(&self.ended).values() {
            add(s);
        }
        drop(live);
        let mut streams: Vec<StreamStats> = streams.into_values().collect();
        if streams.is_empty() {
            streams.push(StreamStats::new(empty));
        }
        let cpu = process_cpu_seconds() - self.cpu_start;
        // Rates and utilisation over the busy time: idle hours between clients dilute nothing.
        let mut report = crate::device_report(device, &streams, self.busy.busy_ns(), cpu);
        let stream_busy = locked(&self.stream_busy);
        // (`streams` are the report's, in order.)
        assert_eq!(
            report.streams.len(),
            streams.len(),
            "the report has {} streams of {}",
            report.streams.len(),
            streams.len()
        );
        for (shown, stats) in report.streams.iter_mut().zip(&streams) {
            assert_eq!(shown.name, stats.name, "the report's streams out of order");
            if let Some(clock) = stream_busy.get(&stats.name) {
                // The device's share of the latency, attributed by `device_report`, stays.
                let breakdown = std::mem::take(&mut shown.totals.breakdown_ns);
                shown.totals = stats.totals(clock.busy_ns());
                shown.totals.breakdown_ns = breakdown;
            }
        }
        drop(stream_busy);
        report.uptime_ns = Some(self.started.elapsed().as_nanos() as u64);
        report.require_enough_served();
        report
    }
}
