//! An NVMe completion queue: 16-byte entries whose phase bit says they are new, and a CQ head
//! doorbell through which the host returns consumed entries (NVMe base specification §4.6;
//! OpenExpress's "completion" stage).
//!
//! The device writes an entry's first 8 bytes, then the last 8 (with status, command
//! identifier and phase bit) with a Release store; the host polls the phase bit of its next
//! entry with an Acquire load, so it never reads a half-written entry. The phase the device
//! writes flips each time it wraps, which is how the host tells a new entry from last lap's
//! without the device ever clearing one. The head doorbell counts entries consumed; the device
//! reads it (Acquire) only when its own count says the queue may be full.
//!
//! Safe code on atomics.

use std::fmt;

use crate::sync::{Arc, AtomicU64, Ordering};

use crate::ring::{RingError, RING_ENTRIES_MAX, RING_ENTRIES_MIN};

/// One completion queue entry (16 bytes; the fields the emulated device fills).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Dword 0, command specific (the emulator puts the bytes transferred here).
    pub result: u32,
    /// Submission queue head pointer at the time of completion (dword 2, bits 15:0).
    pub sq_head: u16,
    /// Submission queue identifier (dword 2, bits 31:16).
    pub sq_id: u16,
    /// Command identifier (dword 3, bits 15:0): the tag.
    pub cid: u16,
    /// Status field (dword 3, bits 31:17), 15 bits.
    pub status: u16,
}

const STATUS_MAX: u16 = 0x7fff;

impl Cqe {
    fn hi(self, phase: bool) -> u64 {
        assert!(self.status <= STATUS_MAX, "status is 15 bits");
        let dw2 = u64::from(self.sq_head) | (u64::from(self.sq_id) << 16);
        let dw3 = u64::from(self.cid) | (u64::from(phase) << 16) | (u64::from(self.status) << 17);
        dw2 | (dw3 << 32)
    }

    fn from_words(lo: u64, hi: u64) -> (Cqe, bool) {
        let dw3 = hi >> 32;
        let cqe = Cqe {
            result: lo as u32,
            sq_head: hi as u16,
            sq_id: (hi >> 16) as u16,
            cid: dw3 as u16,
            status: ((dw3 >> 17) as u16) & STATUS_MAX,
        };
        (cqe, (dw3 >> 16) & 1 == 1)
    }
}

struct Slot {
    lo: AtomicU64,
    hi: AtomicU64,
}

struct Shared {
    slots: Box<[Slot]>,
    /// CQ head doorbell: entries the host has consumed.
    head_doorbell: AtomicU64,
}

/// Creates a completion queue of `capacity` entries: the device's end and the host's end.
pub fn split(capacity: usize) -> Result<(CqDevice, CqHost), RingError> {
    if !(RING_ENTRIES_MIN..=RING_ENTRIES_MAX).contains(&capacity) || !capacity.is_power_of_two() {
        return Err(RingError::Capacity { capacity });
    }
    // Phase starts at 0 in memory and the device's first lap writes 1, as in NVMe.
    let slots = (0..capacity)
        .map(|_| Slot {
            lo: AtomicU64::new(0),
            hi: AtomicU64::new(0),
        })
        .collect();
    let shared = Arc::new(Shared {
        slots,
        head_doorbell: AtomicU64::new(0),
    });
    Ok((
        CqDevice {
            shared: Arc::clone(&shared),
            laps: Laps::new(capacity),
            tail: 0,
            head_cached: 0,
        },
        CqHost {
            shared,
            laps: Laps::new(capacity),
            head: 0,
        },
    ))
}

/// The device's end: posts entries.
pub struct CqDevice {
    shared: Arc<Shared>,
    laps: Laps,
    /// Entries posted.
    tail: u64,
    /// The head doorbell as last read.
    head_cached: u64,
}

/// The host's end: consumes entries and rings the head doorbell.
pub struct CqHost {
    shared: Arc<Shared>,
    laps: Laps,
    /// Entries consumed.
    head: u64,
}

/// Where a count of entries falls in a queue of a power-of-two capacity: shifts and masks,
/// as the capacity is one, not divisions (two per entry posted or taken).
#[derive(Clone, Copy)]
struct Laps {
    mask: u64,
    shift: u32,
}

impl Laps {
    fn new(capacity: usize) -> Self {
        debug_assert!(capacity.is_power_of_two());
        Laps {
            mask: capacity as u64 - 1,
            shift: capacity.trailing_zeros(),
        }
    }

    /// The slot of the `counter`-th entry.
    #[inline]
    fn slot(self, counter: u64) -> usize {
        (counter & self.mask) as usize
    }

    /// The phase the `counter`-th entry is written with: lap 0 writes 1, lap 1 writes 0, ...
    #[inline]
    fn phase(self, counter: u64) -> bool {
        (counter >> self.shift) & 1 == 0
    }
}

impl CqDevice {
    /// Posts `cqe`, or hands it back when the host has not freed a slot.
    #[inline]
    pub fn post(&mut self, cqe: Cqe) -> Result<(), Cqe> {
        let capacity = self.shared.slots.len();
        if self.tail - self.head_cached == capacity as u64 {
            // Acquire pairs with the host's Release of the doorbell: its reads of the entry
            // happen before our overwrite.
            self.head_cached = self.shared.head_doorbell.load(Ordering::Acquire);
            if self.tail - self.head_cached == capacity as u64 {
                return Err(cqe);
            }
        }
        let slot = &self.shared.slots[self.laps.slot(self.tail)];
        slot.lo.store(u64::from(cqe.result), Ordering::Relaxed);
        // Release publishes `lo` (and the read data in the DMA buffer) with the phase bit.
        slot.hi
            .store(cqe.hi(self.laps.phase(self.tail)), Ordering::Release);
        self.tail += 1;
        Ok(())
    }
}

impl CqHost {
    /// Takes the next entry if the device has posted it, and rings the head doorbell.
    #[inline]
    pub fn pop(&mut self) -> Option<Cqe> {
        let slot = &self.shared.slots[self.laps.slot(self.head)];
        // Acquire pairs with the device's Release store of `hi`.
        let hi = slot.hi.load(Ordering::Acquire);
        let (_, phase) = Cqe::from_words(0, hi);
        if phase != self.laps.phase(self.head) {
            return None;
        }
        let lo = slot.lo.load(Ordering::Relaxed);
        let (cqe, _) = Cqe::from_words(lo, hi);
        self.head += 1;
        // Release orders our reads of the entry before the device reuses the slot.
        self.shared
            .head_doorbell
            .store(self.head, Ordering::Release);
        Some(cqe)
    }

    /// Whether the next entry is new (a peek that consumes nothing).
    #[inline]
    pub fn has_next(&self) -> bool {
        let slot = &self.shared.slots[self.laps.slot(self.head)];
        let (_, phase) = Cqe::from_words(0, slot.hi.load(Ordering::Acquire));
        phase == self.laps.phase(self.head)
    }
}

impl fmt::Debug for CqDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqDevice")
            .field("posted", &self.tail)
            .finish()
    }
}

impl fmt::Debug for CqHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqHost")
            .field("consumed", &self.head)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    fn cqe(i: u16) -> Cqe {
        Cqe {
            result: u32::from(i) * 7,
            sq_head: i,
            sq_id: 3,
            cid: i ^ 0x5a5a,
            status: i & STATUS_MAX,
        }
    }

    #[test]
    fn fields_round_trip_through_both_phases() {
        for phase in [false, true] {
            let c = Cqe {
                result: u32::MAX,
                sq_head: 0xffff,
                sq_id: 0x1234,
                cid: 0xabcd,
                status: STATUS_MAX,
            };
            let (back, p) = Cqe::from_words(u64::from(c.result), c.hi(phase));
            assert_eq!(back, c);
            assert_eq!(p, phase);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 3 } else { 256 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Posting and popping across many laps behaves as a bounded FIFO.
        #[test]
        fn matches_vecdeque(log2 in 1u32..=3, ops in proptest::collection::vec(any::<bool>(), 0..if cfg!(miri) { 40 } else { 400 })) {
            let capacity = 1usize << log2;
            let (mut dev, mut host) = split(capacity).unwrap();
            let mut reference = VecDeque::new();
            let mut next = 0u16;
            for post in ops {
                if post {
                    let full = reference.len() == capacity;
                    prop_assert_eq!(dev.post(cqe(next)).is_err(), full);
                    if !full { reference.push_back(cqe(next)); next = next.wrapping_add(1); }
                } else {
                    prop_assert_eq!(host.has_next(), !reference.is_empty());
                    prop_assert_eq!(host.pop(), reference.pop_front());
                }
            }
        }
    }
}
