//! The DRAM write buffer in front of flash behind an FTL (`ftl.write_buffer_bytes`): a write
//! is acknowledged once its pages are in the buffer, and each page leaves the buffer when its
//! program on the die is done. A write that finds the buffer full waits for the earliest
//! program to finish; a flush waits until every buffered page is programmed.
//!
//! Reads are not served from the buffer: a read of a page still in it waits on the die behind
//! the page's program (an approximation that errs slow, documented in docs/flash.md).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Clone, Debug)]
pub(crate) struct WriteBuffer {
    pages_max: usize,
    /// When each buffered page's program ends (earliest first).
    programs: BinaryHeap<Reverse<u64>>,
    /// When the last program booked through the buffer ends: the buffer is empty from then.
    drained_ns: u64,
}

impl WriteBuffer {
    pub fn new(pages_max: usize) -> Self {
        assert!(pages_max > 0, "a write buffer of no pages");
        WriteBuffer {
            pages_max,
            programs: BinaryHeap::with_capacity(pages_max),
            drained_ns: 0,
        }
    }

    /// When a page ready at `ready_ns` is in the buffer: at once if a slot is free by then,
    /// else when the earliest program in it ends. Takes the slot.
    pub fn admit(&mut self, ready_ns: u64) -> u64 {
        while self.programs.peek().is_some_and(|r| r.0 <= ready_ns) {
            self.programs.pop();
        }
        if self.programs.len() < self.pages_max {
            return ready_ns;
        }
        let Reverse(freed) = self.programs.pop().expect("a full buffer holds pages");
        freed.max(ready_ns)
    }

    /// The page just admitted is programmed by `end_ns`: its slot is free from then.
    pub fn programmed(&mut self, end_ns: u64) {
        self.programs.push(Reverse(end_ns));
        self.drained_ns = self.drained_ns.max(end_ns);
    }

    /// When everything admitted so far is programmed (a flush's end, at the earliest
    /// `now_ns`).
    pub fn drained_ns(&self, now_ns: u64) -> u64 {
        self.drained_ns.max(now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_wait_only_for_a_slot_and_a_flush_for_every_program() {
        let mut b = WriteBuffer::new(2);
        assert_eq!(b.admit(10), 10);
        b.programmed(110);
        assert_eq!(b.admit(10), 10);
        b.programmed(60);
        // Full: the third waits for the earliest program (60), not the first admitted.
        assert_eq!(b.admit(20), 60);
        b.programmed(200);
        assert_eq!(b.drained_ns(0), 200);
        // By 150 both earlier programs are done: two free slots... one taken by the 200.
        assert_eq!(b.admit(150), 150);
        b.programmed(250);
        assert_eq!(b.admit(150), 200);
        assert_eq!(b.drained_ns(300), 300, "an empty buffer drains at once");
    }
}
