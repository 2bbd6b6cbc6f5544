//! Pre-allocated DMA buffers, one per tag (Moneta: "pre-allocate buffers during
//! initialization; static buffer address for each tag", so no address travels in a command).
//!
//! Ownership of a buffer passes with its command: the host owns `buffer(tag)` until it
//! pushes the command for `tag` into the submission ring; the device owns it from popping that
//! command until it pushes the completion; then the host owns it again. The rings' release /
//! acquire ordering makes each side's writes visible to the other. The arena itself only
//! hands out raw access; the safe API sits in the queue pair, which holds the protocol.

use std::cell::UnsafeCell;

/// Largest arena: 1 GiB (tags x buffer size).
pub const ARENA_BYTES_MAX: usize = 1 << 30;

pub struct Arena {
    bytes: Box<[UnsafeCell<u8>]>,
    buffer_bytes: usize,
    buffers: usize,
}

// SAFETY: the arena is plain memory; every access goes through `buffer`, whose contract (one
// owner per buffer at a time, handed over through the rings' release/acquire) rules out data
// races.
unsafe impl Sync for Arena {}
// SAFETY: as above; the memory has no thread affinity.
unsafe impl Send for Arena {}

impl Arena {
    /// `buffers` buffers of `buffer_bytes` each, zeroed. `None` when the total is zero or over
    /// `ARENA_BYTES_MAX`.
    pub fn new(buffers: usize, buffer_bytes: usize) -> Option<Self> {
        let total = buffers.checked_mul(buffer_bytes)?;
        if total == 0 || total > ARENA_BYTES_MAX {
            return None;
        }
        let bytes: Box<[UnsafeCell<u8>]> = (0..total).map(|_| UnsafeCell::new(0)).collect();
        Some(Arena {
            bytes,
            buffer_bytes,
            buffers,
        })
    }

    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    pub fn buffers(&self) -> usize {
        self.buffers
    }

    /// The buffer of `index`.
    ///
    /// # Safety
    /// The caller must own buffer `index` under the hand-over protocol in the module docs: no
    /// other thread may access it while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn buffer(&self, index: usize) -> &mut [u8] {
        assert!(index < self.buffers, "buffer {index} of {}", self.buffers);
        let start = index * self.buffer_bytes;
        let cells = &self.bytes[start..start + self.buffer_bytes];
        // SAFETY: `UnsafeCell<u8>` has the layout of `u8`; the range is in bounds (slicing
        // checked it); exclusivity is the caller's promise above.
        unsafe { std::slice::from_raw_parts_mut(UnsafeCell::raw_get(cells.as_ptr()), cells.len()) }
    }

    /// The buffer of `index`, to read.
    ///
    /// # Safety
    /// The caller must own buffer `index` under the hand-over protocol in the module docs and
    /// hold no `buffer(index)` slice: nothing may write it while the returned slice lives.
    /// Several shared slices of one buffer may live at once.
    pub unsafe fn buffer_to_read(&self, index: usize) -> &[u8] {
        assert!(index < self.buffers, "buffer {index} of {}", self.buffers);
        let start = index * self.buffer_bytes;
        let cells = &self.bytes[start..start + self.buffer_bytes];
        // SAFETY: as in `buffer`, for shared access; no writer is the caller's promise above.
        unsafe { std::slice::from_raw_parts(UnsafeCell::raw_get(cells.as_ptr()), cells.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_disjoint_and_sized() {
        let a = Arena::new(4, 512).unwrap();
        // SAFETY: single thread; each buffer borrowed once at a time.
        unsafe {
            a.buffer(0).fill(1);
            a.buffer(3).fill(4);
            assert_eq!(a.buffer(1).len(), 512);
            assert!(a.buffer(1).iter().all(|&b| b == 0));
            assert!(a.buffer(0).iter().all(|&b| b == 1));
            assert!(a.buffer(3).iter().all(|&b| b == 4));
        }
        assert!(Arena::new(0, 512).is_none());
        assert!(Arena::new(1 << 20, 1 << 20).is_none());
    }
}
