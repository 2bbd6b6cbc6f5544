//! The C allocator's tuning for the commands that simulate many runs (`sim` and its sweeps,
//! `fit`). Each simulated run builds its report from latency histograms of 256 KiB each
//! (`nvarray_histogram::NsHistogram` and `hdrhistogram`'s, about ten a run), and glibc
//! serves blocks that size from the kernel (`mmap`) or trims them back to it once freed, so
//! every run page-faulted its histograms in again: a third of a fit's time was the kernel's
//! (`perf record` on `nvarray fit`, issue 61). Serving them from the heap and keeping what is
//! freed there ends that: a fit of 193 jobs on two threads went from 9.5 s to 6.4 s for 20
//! evaluations, system time from 6.0 s to 0.2 s (docs/perf.md, "Issue 61").

/// Blocks below this come from the heap: glibc's own ceiling for its sliding threshold
/// (`DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit), so a large buffer (a device's backing memory)
/// is still mapped lazily by the kernel.
const MMAP_THRESHOLD_BYTES: libc::c_int = 32 << 20;
/// Free memory the heap keeps before giving any back.
const TRIM_THRESHOLD_BYTES: libc::c_int = 256 << 20;

// glibc refuses an mmap threshold above its maximum (4 MiB x sizeof(long) on 64-bit), and a
// trim threshold below the mmap threshold would give a freed block straight back.
const _: () =
    assert!(MMAP_THRESHOLD_BYTES as usize <= 4 * 1024 * 1024 * std::mem::size_of::<libc::c_long>());
const _: () = assert!(TRIM_THRESHOLD_BYTES >= MMAP_THRESHOLD_BYTES);

/// Tunes the allocator as above; call it before any thread starts.
pub fn keep_freed_memory() {
    // SAFETY: mallopt only sets glibc's allocator parameters; it is called from `main` before
    // any other thread exists, and its failure (a 0 return) leaves the defaults, which are
    // only slower.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
    }
}
