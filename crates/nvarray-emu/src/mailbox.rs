//! The hand-off from the thread that runs the timing model to the thread that serves a queue
//! pair.
//!
//! The model is one serial device; whichever thread visits it finishes the commands of every
//! queue pair whose time has come. A command of its own queue pair it keeps; another's it puts
//! in that pair's `Mailbox`, and the pair's owner takes it on its next pass. The owner looks at
//! a flag first, so a pass with no mail costs one load of a line only the model's visitors
//! write, and the lock behind it is taken only when there is something to take.
//!
//! The flag is only ever changed with the lock held, so it is never false while items wait
//! (`take_into` cannot miss a put that completed before it looked), and a put that
//! happens-before a reader's Acquire load of anything the putter stored with Release after
//! it (the engine's `advanced_ns`) is seen by that reader's `take_into`. Both are checked by
//! loom in `tests/loom_mailbox.rs`.

use crate::sync::{lock, AtomicBool, Mutex, Ordering};

pub struct Mailbox<T> {
    /// Whether `items` holds anything; changed only with `items` locked.
    full: AtomicBool,
    items: Mutex<Vec<T>>,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Mailbox {
            full: AtomicBool::new(false),
            items: Mutex::new(Vec::new()),
        }
    }
}

impl<T> Mailbox<T> {
    /// Puts `batch`'s items in the box (in order, after any already there) and empties it.
    pub fn put_all(&self, batch: &mut Vec<T>) {
        if batch.is_empty() {
            return;
        }
        let mut items = lock(&self.items);
        items.append(batch);
        // Release: pairs with `take_into`'s Acquire load, for readers that look without the
        // lock first.
        self.full.store(true, Ordering::Release);
    }

    /// Moves everything in the box, in the order it was put, to the end of `out`. Returns
    /// whether there was anything.
    pub fn take_into(&self, out: &mut Vec<T>) -> bool {
        if !self.full.load(Ordering::Acquire) {
            return false;
        }
        let mut items = lock(&self.items);
        self.full.store(false, Ordering::Relaxed);
        out.append(&mut items);
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_once_in_the_order_they_were_put() {
        let mailbox = Mailbox::default();
        let mut out = Vec::new();
        assert!(!mailbox.take_into(&mut out));
        mailbox.put_all(&mut vec![1, 2]);
        mailbox.put_all(&mut vec![3]);
        assert!(mailbox.take_into(&mut out));
        assert_eq!(out, [1, 2, 3]);
        assert!(!mailbox.take_into(&mut out), "taken items stay taken");
        mailbox.put_all(&mut Vec::new());
        assert!(!mailbox.take_into(&mut out), "an empty batch puts nothing");
    }
}
