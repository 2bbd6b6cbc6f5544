//! `BusyClock`: a server's active time, over which its rates are divided.

/// A client's time between its requests (its own software, the network) that is still part
/// of its rate: a gap shorter than this between two requests in flight counts as active,
/// longer ones (idle time between programs) do not.
pub const ACTIVE_GAP_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// A server's active time: time with at least one interval begun and not yet ended (a
/// request in flight; for `serve`, a connection's session from its first request to its
/// close), over any number of threads, plus the gaps shorter than `gap_max` between them. A server's rates are divided
/// by it, so idle time between clients does not dilute them (a server up 10 s that served
/// fio for 3 s reports fio's rate, not a third of it), while the client's own time between
/// requests still counts, as it does in the client's measurement.
#[derive(Debug)]
pub struct BusyClock {
    gap_max: std::time::Duration,
    state: std::sync::Mutex<BusyState>,
}

#[derive(Debug, Default)]
struct BusyState {
    in_flight: u64,
    /// When `in_flight` last rose from 0.
    since: Option<std::time::Instant>,
    /// When `in_flight` last fell to 0.
    last_end: Option<std::time::Instant>,
    /// Active intervals that have ended.
    ended_ns: u64,
}

impl Default for BusyClock {
    fn default() -> Self {
        Self::with_gap_max(ACTIVE_GAP_MAX)
    }
}

impl BusyClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock that bridges gaps up to `gap_max` (zero: strictly the time requests were in
    /// flight).
    pub fn with_gap_max(gap_max: std::time::Duration) -> Self {
        BusyClock {
            gap_max,
            state: std::sync::Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BusyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request has started.
    pub fn begin(&self) {
        self.begin_at(std::time::Instant::now());
    }

    /// A request started at `now` (for callers that timed it already).
    pub fn begin_at(&self, now: std::time::Instant) {
        let mut s = self.state();
        if s.in_flight == 0 {
            if let Some(end) = s.last_end {
                let gap = now.saturating_duration_since(end);
                if gap <= self.gap_max {
                    s.ended_ns += gap.as_nanos() as u64;
                }
            }
            s.since = Some(now);
        }
        s.in_flight += 1;
    }

    /// A request begun with `begin` has ended (answered, failed or abandoned).
    pub fn end(&self) {
        let mut s = self.state();
        debug_assert!(s.in_flight > 0, "end without begin");
        s.in_flight = s.in_flight.saturating_sub(1);
        if s.in_flight == 0 {
            let now = std::time::Instant::now();
            if let Some(since) = s.since.take() {
                s.ended_ns += now.duration_since(since).as_nanos() as u64;
            }
            s.last_end = Some(now);
        }
    }

    /// Active nanoseconds so far, the interval under way included.
    pub fn busy_ns(&self) -> u64 {
        let s = self.state();
        s.ended_ns + s.since.map_or(0, |t| t.elapsed().as_nanos() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overlapping requests count once, and without gap bridging the time between two is
    /// not busy.
    #[test]
    fn busy_time_is_the_union_of_requests_in_flight() {
        let clock = BusyClock::with_gap_max(std::time::Duration::ZERO);
        assert_eq!(clock.busy_ns(), 0);
        let wall = std::time::Instant::now();
        clock.begin();
        clock.begin();
        std::thread::sleep(std::time::Duration::from_millis(20));
        clock.end();
        clock.end();
        let wall_ns = wall.elapsed().as_nanos() as u64;
        let first = clock.busy_ns();
        // Counted once: at least the 20 ms, at most the wall time around it (twice, if each
        // request counted on its own).
        assert!(
            (20_000_000..=wall_ns).contains(&first),
            "{first} of {wall_ns}"
        );
        // Idle: nothing in flight, the clock stands still, and the gap is not counted.
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(clock.busy_ns(), first);
        clock.begin();
        clock.end();
        assert!(clock.busy_ns() < first + 5_000_000, "the gap was counted");
    }

    /// A gap shorter than `gap_max` between requests (the client's own time) counts; the idle
    /// time after the last request does not, until another request comes within the gap.
    #[test]
    fn short_gaps_between_requests_count_as_active() {
        let clock = BusyClock::with_gap_max(std::time::Duration::from_secs(3600));
        clock.begin();
        clock.end();
        let after_first = clock.busy_ns();
        std::thread::sleep(std::time::Duration::from_millis(10));
        assert_eq!(clock.busy_ns(), after_first, "trailing idle time counted");
        clock.begin();
        clock.end();
        assert!(
            clock.busy_ns() >= after_first + 10_000_000,
            "the 10 ms gap was not bridged"
        );
    }
}
