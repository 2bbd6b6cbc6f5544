//! What an access is, and the span of bank time one access has booked so far.

use crate::timeline::Timeline;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// The access being booked: its ready time, the engine's now, and the span of bank time
/// booked so far (first start, last end).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Booking {
    pub now_ns: u64,
    pub ready_ns: u64,
    pub first_start_ns: u64,
    pub last_end_ns: u64,
}

impl Booking {
    /// An access ready at `ready_ns`, at the engine's `now_ns`, with nothing booked yet.
    pub fn start(now_ns: u64, ready_ns: u64) -> Booking {
        Booking {
            now_ns,
            ready_ns,
            first_start_ns: u64::MAX,
            last_end_ns: ready_ns,
        }
    }

    /// Counts a wait from `from_ns` to `until_ns` (a write waiting for a free slot in a
    /// write buffer) in the access's media time.
    #[inline]
    pub fn waited(&mut self, from_ns: u64, until_ns: u64) {
        if until_ns > from_ns {
            self.first_start_ns = self.first_start_ns.min(from_ns);
            self.last_end_ns = self.last_end_ns.max(until_ns);
        }
    }

    /// Books `ns` on `bank` from `ready_ns`; a `span` booking counts in the access's media
    /// time. Returns its end.
    #[inline]
    pub fn book(&mut self, bank: &mut Timeline, ready_ns: u64, ns: u64, span: bool) -> u64 {
        let start = bank.reserve(self.now_ns, ready_ns, ns);
        if span {
            self.first_start_ns = self.first_start_ns.min(start);
            self.last_end_ns = self.last_end_ns.max(start + ns);
        }
        start + ns
    }
}
