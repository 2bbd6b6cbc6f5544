//! The memory host and device share for data: what a real device would reach by DMA.

use std::sync::atomic::AtomicU64;

use crate::arena::Arena;

/// The memory host and device share: per-tag data buffers (Moneta: "static buffer address for
/// each tag"), per-tag PRP list pages for NVMe, and per-tag in-data completion words.
pub struct DmaMemory {
    pub data: Arena,
    /// NVMe only: PRP list pages, `list_bytes` per tag.
    pub lists: Option<Arena>,
    /// DC Express in-data completion: the word the device writes after a read's data. 0 while
    /// the read is pending; `IN_DATA_DONE | status` once the data is in place.
    pub in_data: Box<[AtomicU64]>,
    /// Per tag: the model's completion time (the emulator's clock, ns) of the command last
    /// completed on it, written before its completion is posted, so the host reads the one of
    /// the completion it sees. The host tells with it the device's time from its own (a
    /// completion collected late because the host thread was paused is not the device's).
    pub deadlines_ns: Box<[AtomicU64]>,
    /// Per tag: what the command last completed on it returned, written before its completion
    /// is posted: a Zone Append's block (NVMe carries it in the completion's dwords 0-1;
    /// the emulator keeps its exact status there, and the command word has no room). 0 for
    /// every other command.
    pub results: Box<[AtomicU64]>,
    /// Per tag: when the host made the command on it visible to the device, its doorbell
    /// (the emulator's clock, ns; 0: not stamped). Stored by the host before the submission's
    /// Release and taken (swapped to 0) by the device when it claims the tag, so the model
    /// dates the command by its doorbell, not by when a device thread got round to it: a real
    /// device's clock does not stop while it waits for a CPU (issue 56). A command without a
    /// stamp is dated when it reaches the model, as before.
    pub doorbell_ns: Box<[AtomicU64]>,
    pub page_bytes: usize,
}

/// Set in an in-data completion word when the device has written it.
pub const IN_DATA_DONE: u64 = 1 << 63;

impl DmaMemory {
    /// The memory for `tags` tags of `data` buffers and their `lists` (NVMe), every word 0.
    pub fn new(data: Arena, lists: Option<Arena>, page_bytes: usize) -> Self {
        let tags = data.buffers();
        if let Some(lists) = &lists {
            assert_eq!(
                lists.buffers(),
                tags,
                "PRP list pages for every tag's buffer"
            );
        }
        let words = || (0..tags).map(|_| AtomicU64::new(0)).collect();
        DmaMemory {
            data,
            lists,
            in_data: words(),
            deadlines_ns: words(),
            results: words(),
            doorbell_ns: words(),
            page_bytes,
        }
    }

    pub fn tags(&self) -> usize {
        self.data.buffers()
    }

    pub fn buffer_bytes(&self) -> usize {
        self.data.buffer_bytes()
    }

    /// PRP list bytes per tag: enough pages for one entry per data page after the first, plus
    /// a chain pointer in the last entry of each full list page (NVMe §4.3).
    pub fn list_bytes_for(buffer_bytes: usize, page_bytes: usize) -> usize {
        let entries = buffer_bytes.div_ceil(page_bytes).saturating_sub(1);
        let per_page = page_bytes / 8 - 1;
        entries.div_ceil(per_page).max(1) * page_bytes
    }
}
