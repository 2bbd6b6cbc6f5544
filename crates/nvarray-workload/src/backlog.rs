//! fio's `verify_backlog=N`: a writing job reads back what it wrote as it goes. After every
//! `N` writes, the next `N` requests are reads of those writes, oldest first, which the
//! emulator checks (fio's `get_io_u` takes the oldest logged writes once the log holds a
//! multiple of `N`, backend.c / io_u.c; its `verify_backlog_batch` defaults to `N`). The
//! engines drain the thread's writes before the reads go (`nvarray-run`'s steering), as fio
//! waits for a logged write still in flight.

use std::collections::VecDeque;

use crate::spec::{Direction, Request};

/// One thread's backlog of writes to read back.
#[derive(Clone, Debug)]
pub(crate) struct VerifyBacklog {
    every: usize,
    written: VecDeque<Request>,
    to_read: VecDeque<Request>,
}

impl VerifyBacklog {
    /// A backlog read back every `every` writes (at least 1).
    pub(crate) fn new(every: u64) -> VerifyBacklog {
        let every = usize::try_from(every).unwrap_or(usize::MAX).max(1);
        VerifyBacklog {
            every,
            written: VecDeque::with_capacity(every.min(1 << 16)),
            to_read: VecDeque::with_capacity(every.min(1 << 16)),
        }
    }

    /// The next read-back, if one is due.
    pub(crate) fn next_read(&mut self) -> Option<Request> {
        self.to_read.pop_front()
    }

    /// `r` was generated: a write joins the backlog, which is read back once full.
    pub(crate) fn generated(&mut self, r: Request) {
        debug_assert!(
            self.to_read.is_empty(),
            "a request generated while read-backs are due"
        );
        if r.op != Direction::Write {
            return;
        }
        self.written.push_back(r);
        if self.written.len() >= self.every {
            self.to_read.extend(self.written.drain(..).map(|w| Request {
                op: Direction::Read,
                ..w
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(offset_bytes: u64) -> Request {
        Request {
            op: Direction::Write,
            offset_bytes,
            len_bytes: 4096,
        }
    }

    #[test]
    fn every_n_writes_are_read_back_oldest_first() {
        let mut b = VerifyBacklog::new(2);
        b.generated(write(0));
        assert_eq!(b.next_read(), None);
        b.generated(Request {
            op: Direction::Read,
            ..write(99)
        });
        b.generated(write(8192));
        let reads: Vec<u64> = std::iter::from_fn(|| b.next_read())
            .map(|r| {
                assert_eq!(r.op, Direction::Read);
                r.offset_bytes
            })
            .collect();
        assert_eq!(reads, [0, 8192], "the job's own reads are not read back");
    }
}
