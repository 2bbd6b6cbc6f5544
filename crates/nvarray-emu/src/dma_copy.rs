//! The copy that moves a command's data between the backing, the DMA buffers and the host's
//! memory: vector loads and stores, never `rep movsb`.
//!
//! glibc's `memcpy` switches to `rep movsb` from 2,112 bytes on this project's test VMs (AMD
//! EPYC with ERMS and FSRM; `glibc.cpu.x86_rep_movsb_threshold`). Measured inside the
//! emulator, copying a prefetched 4 KiB block into a tag buffer that the host's core touched
//! last took 2-4 µs with it (1 in 12 copies 8-16 µs), against 0.13-0.5 µs for 2 KiB with
//! vector moves: the late copy of a small read then lands after its deadline, which is what
//! made the default 4 KiB `nvarray bench` unfaithful (`docs/perf.md`, "The 4 KiB lateness
//! tail"). The same copy between two cache-hot buffers of one core takes 50 ns either way,
//! so it is the string instruction's handling of lines that another core owns, not the
//! copy's size. This loop moves 64 bytes per iteration with 16-byte SSE2 loads and stores
//! (every x86-64 CPU has them), which the cache fetches in parallel; elsewhere it is
//! `copy_from_slice`.

/// Copies `src` into `dst`, which must have the same length.
#[inline]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "a copy between buffers of one length");
    // SAFETY: both slices hold `src.len()` bytes and cannot overlap (one is borrowed
    // mutably).
    unsafe { copy_raw(dst.as_mut_ptr(), src.as_ptr(), src.len()) }
}

/// `copy` between raw ranges (the backing's mapping is never handed out as a slice).
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `len` bytes, and the two ranges must
/// not overlap.
#[inline]
pub unsafe fn copy_raw(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let body = len & !63;
        // SAFETY: the caller's contract covers `body <= len` bytes; ordinary stores take any
        // address.
        unsafe { copy_body::<false>(dst, src, body) };
        // SAFETY: the last len - body < 64 bytes, inside both ranges; memcpy's short path for
        // them never uses `rep movsb`.
        unsafe { std::ptr::copy_nonoverlapping(src.add(body), dst.add(body), len - body) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// `copy_raw` into memory the CPU will not read again soon (a write's data going into a
/// backing larger than the caches): 16-byte-aligned destinations take non-temporal stores,
/// which write whole lines without first reading them in (a cold 4 KiB block is 64 reads
/// the cache would do for nothing, and they were most of `nvarray serve`'s CPU per 4 KiB
/// write outside the kernel; docs/perf.md, issue 17's third session). A fence at the end
/// orders them before anything the caller stores next (the completion that publishes the
/// write). Other destinations take `copy_raw`.
///
/// # Safety
/// As `copy_raw`.
#[inline]
pub unsafe fn copy_raw_streaming(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if (dst as usize).is_multiple_of(16) && len >= 64 {
        let body = len & !63;
        // SAFETY: the caller's contract covers `body <= len` bytes; `dst` is 16-byte aligned,
        // as the streaming stores require.
        unsafe { copy_body::<true>(dst, src, body) };
        // SAFETY: the tail, inside both ranges; then a fence (SSE2, on every x86-64) so the
        // weakly ordered streaming stores are visible before any later store.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(body), dst.add(body), len - body);
            std::arch::x86_64::_mm_sfence();
        }
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { copy_raw(dst, src, len) }
}

/// The loop both copies share: 64 bytes per iteration, four 16-byte loads, then four stores,
/// streaming (`STREAM`) or ordinary.
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `body` bytes (a multiple of 64), the
/// ranges must not overlap, and with `STREAM` `dst` must be 16-byte aligned.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
unsafe fn copy_body<const STREAM: bool>(dst: *mut u8, src: *const u8, body: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128, _mm_stream_si128};
    let mut at = 0;
    while at < body {
        // SAFETY: at + 64 <= body, inside both ranges (the caller's contract); the loads
        // accept any address, and with `STREAM` `dst + at + 16 k` stays 16-byte aligned.
        unsafe {
            let v = [0, 16, 32, 48].map(|k| _mm_loadu_si128(src.add(at + k) as *const __m128i));
            for (k, v) in [0, 16, 32, 48].into_iter().zip(v) {
                let to = dst.add(at + k) as *mut __m128i;
                if STREAM {
                    _mm_stream_si128(to, v);
                } else {
                    _mm_storeu_si128(to, v);
                }
            }
        }
        at += 64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every length and alignment, including the tail under 64 bytes and empty copies.
        #[test]
        fn copies_exactly_the_bytes(
            data in proptest::collection::vec(any::<u8>(), 0..9000),
            src_skip in 0usize..64,
            dst_skip in 0usize..64,
        ) {
            let src_skip = src_skip.min(data.len());
            let src = &data[src_skip..];
            let mut dst = vec![0xa5u8; src.len() + dst_skip + 8];
            copy(&mut dst[dst_skip..dst_skip + src.len()], src);
            prop_assert_eq!(&dst[dst_skip..dst_skip + src.len()], src);
            prop_assert!(dst[..dst_skip].iter().all(|&b| b == 0xa5), "nothing before");
            prop_assert!(dst[dst_skip + src.len()..].iter().all(|&b| b == 0xa5), "nothing after");
        }
    }

    proptest! {
        /// The streaming copy, aligned or not, moves exactly the bytes too.
        #[test]
        fn streaming_copies_exactly_the_bytes(
            data in proptest::collection::vec(any::<u8>(), 0..9000),
            dst_skip in 0usize..64,
        ) {
            let mut dst = vec![0xa5u8; data.len() + 64 + 8];
            // Start at a 16-byte boundary of the allocation, then skip.
            let aligned = dst.as_ptr().align_offset(16);
            let at = aligned + dst_skip;
            // SAFETY: `at + data.len()` is inside `dst`; `data` is a separate allocation.
            unsafe { copy_raw_streaming(dst.as_mut_ptr().add(at), data.as_ptr(), data.len()) };
            prop_assert_eq!(&dst[at..at + data.len()], &data[..]);
            prop_assert!(dst[..at].iter().all(|&b| b == 0xa5), "nothing before");
            prop_assert!(dst[at + data.len()..].iter().all(|&b| b == 0xa5), "nothing after");
        }
    }

    #[test]
    #[should_panic(expected = "one length")]
    fn buffers_of_different_lengths_are_a_bug() {
        copy(&mut [0u8; 3], &[1u8; 4]);
    }
}
