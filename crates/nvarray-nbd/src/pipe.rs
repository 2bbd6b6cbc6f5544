//! An in-memory byte stream in both directions, for running the server without sockets (the
//! deterministic simulation, `simulation`): one end is the server's `Stream::Memory`, the other
//! a simulated client's.
//!
//! It behaves as a non-blocking socket whose buffers never fill: a read takes what is
//! buffered, finds end of file once the other end has closed its writing side (or this end its
//! reading side), and otherwise would block; a write takes everything, or fails with
//! `BrokenPipe` once the other end can no longer read. Nothing here ever waits: in a
//! simulation only one party runs at a time, so a wait for the other could never end. Waits
//! for the client therefore end at once, as if the client had stayed silent for as long as the
//! server was willing to wait (see `Stream::wait_ready`).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// One direction of the stream.
#[derive(Default)]
struct Direction {
    bytes: VecDeque<u8>,
    /// The writer has closed (its end dropped or its writing side shut down).
    writer_closed: bool,
    /// The reader has closed: writes fail.
    reader_closed: bool,
}

/// Both directions: `[0]` carries what end 0 writes, `[1]` what end 1 writes.
type Directions = [Direction; 2];

/// One end of an in-memory stream.
pub struct MemoryPipe {
    shared: Arc<Mutex<Directions>>,
    /// Which end this is (0 or 1).
    end: usize,
    /// Clones of this end still open, sharing `end`: the end closes when the last goes.
    clones: Arc<()>,
}

impl std::fmt::Debug for MemoryPipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryPipe(end {})", self.end)
    }
}

impl MemoryPipe {
    /// A new stream: its two ends.
    pub fn pair() -> (MemoryPipe, MemoryPipe) {
        let shared = Arc::new(Mutex::new(Directions::default()));
        let end = |end| MemoryPipe {
            shared: Arc::clone(&shared),
            end,
            clones: Arc::new(()),
        };
        (end(0), end(1))
    }

    fn lock(&self) -> MutexGuard<'_, Directions> {
        // Plain byte queues: still consistent after a panic elsewhere.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Another handle on the same end (as `try_clone` on a socket).
    pub fn clone_end(&self) -> MemoryPipe {
        MemoryPipe {
            shared: Arc::clone(&self.shared),
            end: self.end,
            clones: Arc::clone(&self.clones),
        }
    }

    /// Reads what is buffered into `buf`: `Ok(0)` at end of file, `WouldBlock` when nothing is
    /// buffered yet.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut d = self.lock();
        let incoming = &mut d[1 - self.end];
        if incoming.bytes.is_empty() || buf.is_empty() {
            if incoming.writer_closed || incoming.reader_closed || buf.is_empty() {
                return Ok(0);
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(incoming.bytes.len());
        for (to, from) in buf.iter_mut().zip(incoming.bytes.drain(..n)) {
            *to = from;
        }
        Ok(n)
    }

    /// Appends all of `buf` for the other end, unless it can no longer read.
    pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut d = self.lock();
        let outgoing = &mut d[self.end];
        if outgoing.reader_closed || outgoing.writer_closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        outgoing.bytes.extend(buf);
        Ok(buf.len())
    }

    /// Whether a read would return at once (data, or end of file).
    pub fn readable(&self) -> bool {
        let d = self.lock();
        let incoming = &d[1 - self.end];
        !incoming.bytes.is_empty() || incoming.writer_closed || incoming.reader_closed
    }

    /// Bytes this end has written that the other has not read yet.
    pub fn unread_by_peer(&self) -> usize {
        self.lock()[self.end].bytes.len()
    }

    /// Ends reading: reads find end of file, and the other end's writes fail.
    pub fn shutdown_read(&self) {
        let mut d = self.lock();
        d[1 - self.end].reader_closed = true;
        d[1 - self.end].bytes.clear();
    }

    /// Ends writing: the other end reads what is buffered, then end of file.
    pub fn shutdown_write(&self) {
        self.lock()[self.end].writer_closed = true;
    }
}

impl Drop for MemoryPipe {
    fn drop(&mut self) {
        // The last handle on this end closes it both ways, as closing a socket does.
        if Arc::strong_count(&self.clones) == 1 {
            self.shutdown_read();
            self.shutdown_write();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_arrive_in_order_and_closing_ends_the_stream() {
        let (a, b) = MemoryPipe::pair();
        let mut buf = [0u8; 4];
        assert_eq!(
            b.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        a.write(b"hello").unwrap();
        assert_eq!(b.unread_by_peer(), 0);
        assert_eq!(a.unread_by_peer(), 5);
        assert_eq!(b.read(&mut buf).unwrap(), 4);
        assert_eq!(&buf, b"hell");
        let clone = a.clone_end();
        drop(a);
        // A clone keeps the end open.
        assert_eq!(b.read(&mut buf).unwrap(), 1);
        assert!(!b.readable());
        drop(clone);
        assert!(b.readable());
        assert_eq!(b.read(&mut buf).unwrap(), 0);
        assert_eq!(b.write(b"x").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_reader_that_shut_down_drops_what_was_buffered_and_refuses_more() {
        let (a, b) = MemoryPipe::pair();
        a.write(b"abc").unwrap();
        b.shutdown_read();
        let mut buf = [0u8; 4];
        assert_eq!(b.read(&mut buf).unwrap(), 0);
        assert_eq!(a.write(b"x").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
        // The other direction still works.
        b.write(b"ok").unwrap();
        assert_eq!(a.read(&mut buf).unwrap(), 2);
    }
}
