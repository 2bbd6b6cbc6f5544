//! A copy into or out of a file mapping that survives the file losing its pages: the fault
//! (SIGBUS, raised when a page of the mapping no longer has a page of the file behind it —
//! the file was truncated under the device, or its file system could not give a page it
//! had promised) ends the copy with an error instead of the process.
//!
//! How: the copy is a few instructions of assembly between two labels, and a SIGBUS handler
//! that finds the faulting instruction between them moves it to a fix-up that returns "faulted"
//! (what the Linux kernel does for its own copies from user memory, with its exception
//! tables). Nothing is unwound and no Rust frame is skipped: the copy returns normally, with an
//! error. A SIGBUS anywhere else goes to the disposition that was there before (the Rust
//! runtime's, or the default: the process dies as it did without this).
//!
//! Only file backings use it (anonymous memory is touched in full when it is made, and cannot
//! lose pages); its loop is the same 64-byte SSE2 loop as `dma_copy`, with non-temporal stores
//! for the streaming variant. Where there is no x86-64 Linux, copies are unguarded.

/// A copy stopped at a page of the mapping that has no page of the file behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappingFault;

/// Copies `len` bytes from `src` to `dst`; `streaming` uses non-temporal stores where `dst` is
/// 16-byte aligned (a fence after them orders them before what the caller stores next).
/// Either range may lie in a file mapping that loses pages meanwhile.
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `len` bytes apart from pages of a
/// file mapping that may fault; the two ranges must not overlap.
#[inline]
pub unsafe fn copy(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    streaming: bool,
) -> Result<(), MappingFault> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    {
        guard::install();
        let nt = streaming && (dst as usize).is_multiple_of(16);
        // SAFETY: the caller's contract; the handler installed above turns a fault inside the
        // copy into its return value.
        let faulted = unsafe {
            if nt {
                guard::nvarray_guarded_copy_nt(dst, src, len)
            } else {
                guard::nvarray_guarded_copy(dst, src, len)
            }
        };
        if faulted == 0 {
            Ok(())
        } else {
            Err(MappingFault)
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
    {
        // SAFETY: the caller's contract (unguarded: a fault kills the process here).
        unsafe {
            if streaming {
                crate::dma_copy::copy_raw_streaming(dst, src, len)
            } else {
                crate::dma_copy::copy_raw(dst, src, len)
            }
        }
        Ok(())
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
mod guard {
    use std::sync::{Once, OnceLock};

    // rdi = dst, rsi = src, rdx = len; eax = 0 when copied, 1 when a load or store faulted.
    // Every instruction that touches memory lies between `_begin` and `_end`; the fix-up
    // outside them. 64 bytes an iteration with unaligned 16-byte moves (as `dma_copy`), the
    // tail with `rep movsb` (under 64 bytes, where it is not the slow case `dma_copy` avoids).
    std::arch::global_asm!(
        ".pushsection .text.nvarray_guarded_copy,\"ax\",@progbits",
        ".p2align 4",
        ".globl nvarray_guarded_copy_begin",
        ".hidden nvarray_guarded_copy_begin",
        "nvarray_guarded_copy_begin:",
        ".globl nvarray_guarded_copy",
        ".hidden nvarray_guarded_copy",
        "nvarray_guarded_copy:",
        "2:",
        "cmp rdx, 64",
        "jb 3f",
        "movdqu xmm0, [rsi]",
        "movdqu xmm1, [rsi + 16]",
        "movdqu xmm2, [rsi + 32]",
        "movdqu xmm3, [rsi + 48]",
        "movdqu [rdi], xmm0",
        "movdqu [rdi + 16], xmm1",
        "movdqu [rdi + 32], xmm2",
        "movdqu [rdi + 48], xmm3",
        "add rsi, 64",
        "add rdi, 64",
        "sub rdx, 64",
        "jmp 2b",
        "3:",
        "mov rcx, rdx",
        "rep movsb",
        "xor eax, eax",
        "ret",
        ".globl nvarray_guarded_copy_nt",
        ".hidden nvarray_guarded_copy_nt",
        "nvarray_guarded_copy_nt:",
        "4:",
        "cmp rdx, 64",
        "jb 5f",
        "movdqu xmm0, [rsi]",
        "movdqu xmm1, [rsi + 16]",
        "movdqu xmm2, [rsi + 32]",
        "movdqu xmm3, [rsi + 48]",
        "movntdq [rdi], xmm0",
        "movntdq [rdi + 16], xmm1",
        "movntdq [rdi + 32], xmm2",
        "movntdq [rdi + 48], xmm3",
        "add rsi, 64",
        "add rdi, 64",
        "sub rdx, 64",
        "jmp 4b",
        "5:",
        "mov rcx, rdx",
        "rep movsb",
        "sfence",
        "xor eax, eax",
        "ret",
        ".globl nvarray_guarded_copy_end",
        ".hidden nvarray_guarded_copy_end",
        "nvarray_guarded_copy_end:",
        ".globl nvarray_guarded_copy_fixup",
        ".hidden nvarray_guarded_copy_fixup",
        "nvarray_guarded_copy_fixup:",
        "sfence",
        "mov eax, 1",
        "ret",
        ".popsection",
    );

    extern "C" {
        pub fn nvarray_guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> u32;
        pub fn nvarray_guarded_copy_nt(dst: *mut u8, src: *const u8, len: usize) -> u32;
        fn nvarray_guarded_copy_begin();
        fn nvarray_guarded_copy_end();
        fn nvarray_guarded_copy_fixup();
    }

    /// An SA_SIGINFO handler.
    type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

    /// Where a label of the copy's assembly is.
    fn address(label: unsafe extern "C" fn()) -> usize {
        label as usize
    }

    /// The SIGBUS disposition before ours, for faults that are not the copy's.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

    /// Installs the handler, once a process.
    pub fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            // The handler moves only faults between the labels, to a fix-up past them.
            let range = address(nvarray_guarded_copy_begin)..address(nvarray_guarded_copy_end);
            let streaming: unsafe extern "C" fn(*mut u8, *const u8, usize) -> u32 =
                nvarray_guarded_copy_nt;
            assert!(
                range.contains(&(streaming as usize)),
                "the streaming copy lies outside the guarded range"
            );
            assert!(
                !range.contains(&address(nvarray_guarded_copy_fixup)),
                "the fix-up lies inside the guarded range"
            );
            // SAFETY: `sigaction` reads `ours` and writes `previous`, both valid; the handler
            // is async-signal-safe (it reads a `OnceLock` set before it was installed, and
            // writes the interrupted context or calls the previous handler).
            unsafe {
                let mut ours: libc::sigaction = std::mem::zeroed();
                let handler: Handler = on_sigbus;
                ours.sa_sigaction = handler as usize;
                ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut ours.sa_mask);
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                    return;
                }
                let _ = PREVIOUS.set(previous);
                libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut());
            }
        });
    }

    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid `ucontext_t` to an SA_SIGINFO handler; the
        // instruction pointer is general register REG_RIP.
        unsafe {
            let uc = ctx as *mut libc::ucontext_t;
            let rip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
            let at = *rip as usize;
            let range = address(nvarray_guarded_copy_begin)..address(nvarray_guarded_copy_end);
            if range.contains(&at) {
                *rip = address(nvarray_guarded_copy_fixup) as i64;
                return;
            }
            pass_on(sig, info, ctx);
        }
    }

    /// A fault that is not the copy's: what would have happened without this handler.
    ///
    /// # Safety
    /// Called from the SIGBUS handler with its arguments.
    unsafe fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let previous = PREVIOUS.get();
        let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            // Back to the default and return: the instruction faults again and the kernel
            // ends the process with SIGBUS, as it would have (ignoring a fault cannot work).
            // SAFETY: a zeroed `sigaction` with SIG_DFL is a valid disposition.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
            return;
        }
        let siginfo = previous.is_some_and(|p| p.sa_flags & libc::SA_SIGINFO != 0);
        // SAFETY: the previous handler was installed for this signal with these flags, so it
        // has the signature they say.
        unsafe {
            if siginfo {
                let f: Handler = std::mem::transmute(handler);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                f(sig);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// A mapped file, and its length in bytes.
    fn mapped(name: &str, len: usize) -> (std::fs::File, memmap2::MmapRaw, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!(
            "nvarray-mapping-fault-{}-{name}",
            std::process::id()
        ));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.write_all(&vec![7u8; len]).unwrap();
        let map = memmap2::MmapOptions::new().len(len).map_raw(&file).unwrap();
        (file, map, path)
    }

    /// Every length and alignment copies exactly its bytes, both ways.
    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..600u32).map(|i| (i * 7 + 3) as u8).collect();
        for streaming in [false, true] {
            for offset in [0usize, 1, 15, 16] {
                for len in [0usize, 1, 63, 64, 65, 127, 128, 130, 511] {
                    let mut dst = vec![0u8; 600];
                    // SAFETY: both ranges lie in their vectors and do not overlap.
                    let r =
                        unsafe { copy(dst.as_mut_ptr().add(offset), src.as_ptr(), len, streaming) };
                    assert_eq!(r, Ok(()));
                    assert_eq!(&dst[offset..offset + len], &src[..len], "{offset} {len}");
                    assert!(dst[..offset].iter().all(|&b| b == 0));
                    assert!(dst[offset + len..].iter().all(|&b| b == 0));
                }
            }
        }
    }

    /// A file truncated under its mapping: a copy out of the lost pages, and one into them,
    /// return the fault; the process goes on, and a copy of a page still there still works.
    #[test]
    fn a_copy_of_a_page_the_file_lost_returns_the_fault() {
        let page = 4096;
        let (file, map, path) = mapped("truncated", 4 * page);
        file.set_len(page as u64).unwrap();
        let mut buf = vec![0u8; 2 * page];
        for streaming in [false, true] {
            // SAFETY: the mapping is 4 pages long and `buf` 2 pages; pages 1-3 may fault.
            unsafe {
                assert_eq!(
                    copy(
                        buf.as_mut_ptr(),
                        map.as_ptr().add(2 * page),
                        page,
                        streaming
                    ),
                    Err(MappingFault)
                );
                assert_eq!(
                    copy(
                        map.as_mut_ptr().add(page),
                        buf.as_ptr(),
                        2 * page,
                        streaming
                    ),
                    Err(MappingFault)
                );
                assert_eq!(
                    copy(buf.as_mut_ptr(), map.as_ptr(), page, streaming),
                    Ok(())
                );
            }
            assert!(buf[..page].iter().all(|&b| b == 7));
        }
        drop(map);
        std::fs::remove_file(path).unwrap();
    }
}
