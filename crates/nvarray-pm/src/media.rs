//! The two persistent tiers as byte regions, and what "persistent" means for each.
//!
//! * The **NVM tier** is a shared mapping of a file on /dev/shm or a DAX file system. A store
//!   is persistent once its cache line has been written back (`clwb`, else `clflushopt`, else
//!   `clflush`) and an `sfence` has ordered it: the x86 persistence model for memory behind an
//!   ADR domain. The technology's write latency is charged by the caller
//!   (`PoolState::persist_barrier`, `pool_state.rs`).
//! * The **storage tier** is a shared mapping of the backing file; the kernel's page cache is
//!   the DRAM read cache of the seed. A page is persistent after `msync(MS_SYNC)` or
//!   `fdatasync` (the seed's "msync" arrow on slide 18).
//! * The **simulated** variant of either records writes, flushes and fences instead, so the
//!   crash tests can cut power at any chosen instant (`sim.rs`).
//!
//! Callers keep offsets inside the region; every entry point from outside the crate validates
//! offsets before they reach here, and these functions assert it in debug builds.

#[cfg(debug_assertions)]
use std::cell::Cell;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use memmap2::MmapMut;
use nvarray_faults::{BackingFaults, BackingOp, Fault};

use crate::error::{io_err, PmError, Result};
use crate::sim::{SimWorld, Tier};

/// Cache-line size of the persistence model (the simulated world's NVM unit, `sim.rs`).
pub use crate::sim::LINE;

#[cfg(debug_assertions)]
thread_local! {
    /// NVM-tier fences issued by this thread (debug builds). A fence orders only its own
    /// thread's flushes, so the ordering assertions (`cache.rs`) compare two readings of this
    /// thread's count, not a count shared with other committers.
    static NVM_FENCES: Cell<u64> = const { Cell::new(0) };
}

/// NVM-tier fences the calling thread has issued so far (debug builds).
#[cfg(debug_assertions)]
pub(crate) fn nvm_fences_here() -> u64 {
    NVM_FENCES.get()
}

pub(crate) struct Media {
    base: *mut u8,
    len: usize,
    kind: Kind,
}

enum Kind {
    Nvm {
        _map: MmapMut,
        flush: FlushInsn,
    },
    Storage {
        _map: MmapMut,
        file: File,
        path: PathBuf,
        faults: Option<Arc<BackingFaults>>,
        /// The first failed `fdatasync` (see `sync_all`).
        sync_failed: OnceLock<String>,
    },
    Sim {
        world: Arc<SimWorld>,
        tier: Tier,
    },
}

// SAFETY: `base` points into a mapping owned by `kind` (or by the `SimWorld` it holds an `Arc`
// of) for the life of the `Media`. Concurrent access is the shared-memory protocol of the pool:
// bytes are written only by their current owner (log space under the log lock, pages under
// the page locks, cache slots under the maintenance lock), shared words through atomics.
unsafe impl Send for Media {}
// SAFETY: as above.
unsafe impl Sync for Media {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
enum FlushInsn {
    Clwb,
    ClflushOpt,
    Clflush,
    None,
}

impl FlushInsn {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID leaf 7, sub-leaf 0: EBX bit 23 is CLFLUSHOPT, bit 24 is CLWB (Intel SDM
            // vol. 2A, CPUID). std's feature detection does not know these two.
            let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
            if ebx & (1 << 24) != 0 {
                return FlushInsn::Clwb;
            }
            if ebx & (1 << 23) != 0 {
                return FlushInsn::ClflushOpt;
            }
            FlushInsn::Clflush
        }
        #[cfg(not(target_arch = "x86_64"))]
        FlushInsn::None
    }
}

impl Media {
    /// The NVM tier over a shared mapping of `file` (already sized).
    pub fn nvm(file: &File, path: &std::path::Path) -> Result<Media> {
        // SAFETY: the file is ours for the life of the pool; other processes map it too, which
        // is the point, and they follow the same protocol.
        let mut map = unsafe { MmapMut::map_mut(file) }.map_err(io_err(path))?;
        Ok(Media {
            base: map.as_mut_ptr(),
            len: map.len(),
            kind: Kind::Nvm {
                _map: map,
                flush: FlushInsn::detect(),
            },
        })
    }

    /// The storage tier over a shared mapping of the backing file (already sized), with
    /// `faults` injected into its `fdatasync`s.
    pub fn storage(
        file: File,
        path: &std::path::Path,
        faults: Option<Arc<BackingFaults>>,
    ) -> Result<Media> {
        // SAFETY: as for `nvm`.
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io_err(path))?;
        Ok(Media {
            base: map.as_mut_ptr(),
            len: map.len(),
            kind: Kind::Storage {
                _map: map,
                file,
                path: path.to_path_buf(),
                faults,
                sync_failed: OnceLock::new(),
            },
        })
    }

    pub fn simulated(world: Arc<SimWorld>, tier: Tier) -> Media {
        let (base, len) = world.region(tier);
        Media {
            base,
            len,
            kind: Kind::Sim { world, tier },
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn base(&self) -> *mut u8 {
        self.base
    }

    fn check(&self, off: usize, len: usize) {
        debug_assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "media access outside the region: expected {off}+{len} <= {}, found it past the end",
            self.len
        );
    }

    fn sim_op(&self, op: impl FnOnce(&SimWorld, Tier)) {
        if let Kind::Sim { world, tier } = &self.kind {
            op(world, *tier);
        }
    }

    /// Copies `src` to `off`. Not persistent until flushed and fenced (NVM) or synced (storage).
    pub fn write(&self, off: usize, src: &[u8]) {
        self.check(off, src.len());
        self.sim_op(|w, _| w.before_op());
        // SAFETY: in bounds (checked above by the caller's validation); the caller owns these
        // bytes under the pool's protocol, and `src` is DRAM the caller owns, so no overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(off), src.len()) };
        self.sim_op(|w, t| w.wrote(t, off, src.len()));
    }

    /// Copies `len` bytes from `off` into `dst`.
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len());
        // SAFETY: in bounds; a concurrent writer can only be a commit copying committed bytes,
        // which read-committed isolation allows a reader to observe part of.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), dst.as_mut_ptr(), dst.len()) };
    }

    /// The shared 8-byte word at `off` (8-aligned), for volatile coordination between processes.
    pub fn word(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8);
        debug_assert_eq!(
            off % 8,
            0,
            "shared word not 8-aligned: expected offset % 8 == 0, found offset {off}"
        );
        // SAFETY: in bounds, 8-aligned (the mapping is page-aligned and offsets are multiples of
        // 8), and only ever accessed as an atomic by every process.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// Stores a word that is part of the persistent state (8-byte atomic, as the seed relies on).
    pub fn store_word(&self, off: usize, v: u64) {
        self.sim_op(|w, _| w.before_op());
        self.word(off)
            .store(v, std::sync::atomic::Ordering::Release);
        self.sim_op(|w, t| w.wrote(t, off, 8));
    }

    pub fn load_word(&self, off: usize) -> u64 {
        self.word(off).load(std::sync::atomic::Ordering::Acquire)
    }

    /// Writes back the cache lines covering `[off, off + len)` (NVM tier). Ordered by `fence`.
    pub fn flush(&self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        self.check(off, len);
        match &self.kind {
            Kind::Nvm { flush, .. } => {
                let start = off & !(LINE - 1);
                let mut line = start;
                while line < off + len {
                    // SAFETY: `line` is inside the mapping (it starts at or before `off`, on the
                    // same line, and stops before `off + len`).
                    unsafe { flush_line(self.base.add(line), *flush) };
                    line += LINE;
                }
            }
            Kind::Sim { world, tier } => {
                world.before_op();
                world.flushed(*tier, off, len);
            }
            Kind::Storage { .. } => {}
        }
    }

    /// Orders every earlier flush before every later store: the persist point.
    pub fn fence(&self) {
        match &self.kind {
            Kind::Sim { world, tier } => {
                world.before_op();
                world.fenced(*tier);
            }
            _ => std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst),
        }
        #[cfg(debug_assertions)]
        if matches!(
            self.kind,
            Kind::Nvm { .. }
                | Kind::Sim {
                    tier: Tier::Nvm,
                    ..
                }
        ) {
            NVM_FENCES.set(NVM_FENCES.get() + 1);
        }
    }

    /// Flush + fence in one call.
    pub fn persist(&self, off: usize, len: usize) {
        self.flush(off, len);
        self.fence();
    }

    /// Makes every byte of the storage tier persistent (`fdatasync` of the backing file).
    ///
    /// Once one has failed, every later one fails too: Linux reports a write-back error to one
    /// `fdatasync` and then marks the pages clean, so a second would succeed although the pages
    /// it should carry never reached the disk, and the cache would then mark them clean and
    /// reuse their slots: committed data lost (the "fsyncgate" case). The pool's next open
    /// recovers them from the cache.
    pub fn sync_all(&self) -> Result<()> {
        match &self.kind {
            Kind::Storage {
                file,
                path,
                faults,
                sync_failed,
                ..
            } => {
                if let Some(first) = sync_failed.get() {
                    return Err(PmError::WriteBackFailedBefore {
                        path: path.clone(),
                        first: first.clone(),
                    });
                }
                let injected = faults.as_ref().and_then(|f| f.next(BackingOp::Fsync));
                let synced = match injected {
                    Some(fault) => Err(injected_error(fault)),
                    None => file.sync_data(),
                };
                synced.map_err(|e| {
                    let _ = sync_failed.set(e.to_string());
                    io_err(path)(e)
                })
            }
            Kind::Sim { world, tier } => {
                world.before_op();
                world.flushed(*tier, 0, self.len);
                world.fenced(*tier);
                Ok(())
            }
            Kind::Nvm { .. } => {
                self.persist(0, self.len);
                Ok(())
            }
        }
    }
}

/// The error an injected `fault` makes, saying it was injected.
pub(crate) fn injected_error(fault: Fault) -> std::io::Error {
    let e = fault.error();
    std::io::Error::new(e.kind(), format!("{e} (an injected fault)"))
}

/// Faults `[base, base + len)` of a shared mapping in, writable, without changing a byte
/// (`MADV_POPULATE_WRITE`, Linux 5.14+); older kernels read a byte of every page instead,
/// which faults it in readable only. `Pool::prefault` and the unlogged baseline of
/// `bench.rs` both go through here, so the two sides of a comparison start alike: a shared
/// mapping populated by reading (`MAP_POPULATE` does only that) pays a write fault per page
/// at its first store, inside the timed loop.
///
/// # Safety
/// The range must lie inside one live mapping.
pub(crate) unsafe fn prefault(base: *mut u8, len: usize) {
    // SAFETY: the caller guarantees the range is mapped; the advice changes no data.
    let rc = unsafe { libc::madvise(base.cast(), len, libc::MADV_POPULATE_WRITE) };
    if rc != 0 {
        for off in (0..len).step_by(4096) {
            // SAFETY: inside the mapping (the caller's guarantee); a volatile read, so it
            // is not optimised away.
            unsafe { std::ptr::read_volatile(base.add(off)) };
        }
    }
}

/// One cache-line write-back.
///
/// # Safety
/// `p` must point into a live mapping.
#[inline]
unsafe fn flush_line(p: *const u8, insn: FlushInsn) {
    #[cfg(target_arch = "x86_64")]
    match insn {
        // SAFETY: the caller guarantees `p` is mapped; the instruction was detected at start-up.
        FlushInsn::Clwb => unsafe {
            std::arch::asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags))
        },
        // SAFETY: as above.
        FlushInsn::ClflushOpt => unsafe {
            std::arch::asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags))
        },
        // SAFETY: as above; clflush is part of SSE2, which every x86_64 CPU has.
        FlushInsn::Clflush => unsafe {
            std::arch::asm!("clflush [{}]", in(reg) p, options(nostack, preserves_flags))
        },
        FlushInsn::None => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, insn);
}
