//! Where the emulated array's bytes live: anonymous memory, or a file mapped shared.
//!
//! A file mapping is `MAP_SHARED`, so a write copied into it is in the kernel's page cache the
//! moment the copy returns: it survives a `kill -9` of the emulator (not a power cut). With
//! `durable`, `flush` also `msync`s the mapping and `fdatasync`s the file, so flushed data
//! reaches stable storage.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::dma_copy;
use crate::error::EmuError;
use crate::mapping_fault;
use crate::range_locks::RangeLocks;
use nvarray_faults::{BackingFaults, BackingOp, Fault};

/// Largest backing store accepted: 1 TiB (mapping more is possible but nothing here needs it).
pub const BACKING_BYTES_MAX: u64 = 1 << 40;

/// Largest sparse file backing: 64 TiB of address space (a process has 128 TiB on x86-64;
/// only the blocks written take disk). The file system may allow less (ext4: 16 TiB less a
/// block), which it says when the file is sized.
pub const SPARSE_BACKING_BYTES_MAX: u64 = 64 << 40;

/// What the backing store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackingKind {
    /// Anonymous memory (huge pages when the kernel grants them). Lost when the process exits.
    Ram,
    /// A file mapped shared; `durable` makes `flush` reach stable storage. `read_only` opens
    /// and maps it for reading only (every write is refused), so an image on a read-only file
    /// system, or one this user may only read, can be served (`serve --read-only`, a job that
    /// only reads). `sparse` leaves its blocks to be allocated on first write instead of at
    /// open (a device larger than the disk's free space, issue 60): a write the file system
    /// has no room for fails alone (`EmuError::NoSpace`), the device goes on.
    File {
        path: PathBuf,
        durable: bool,
        read_only: bool,
        sparse: bool,
    },
    /// No data kept, for timing studies of devices larger than the machine (issue 60):
    /// writes are discarded and every read returns zeroes (`NONE_READS_AS`), so the device
    /// costs no memory or disk whatever its size. Nothing written can be read back.
    None,
}

/// What a read of `BackingKind::None` returns, whatever was written: zeroes, as a block of a
/// new drive that was never written (and the cheapest pattern to make).
pub const NONE_READS_AS: u8 = 0;

impl BackingKind {
    /// The same backing opened for reading only: a file that exists (a new one is made, so
    /// is written); RAM and a new file stay as they are.
    pub fn read_only(self) -> BackingKind {
        match self {
            BackingKind::File {
                path,
                durable,
                sparse,
                ..
            } if path.exists() => BackingKind::File {
                path,
                durable,
                read_only: true,
                sparse,
            },
            other => other,
        }
    }
}

/// How much of a read `Backing::prefetch` brings into the cache: enough for the reads that
/// are copied when the model finishes them (`queue_work::COPY_WHEN_DONE_MAX_BYTES`).
pub const PREFETCH_MAX_BYTES: usize = 4096;

/// A backing at least this large takes its writes with streaming stores
/// (`dma_copy::copy_raw_streaming`): it is larger than any cache here, so a random block just
/// written would leave the cache before it is read again, and reading its lines in before
/// overwriting them is wasted. A smaller device keeps ordinary stores, so data written and
/// soon read back (a verify run on a few MiB) stays cached.
pub const STREAMING_WRITES_MIN_BYTES: u64 = 256 << 20;

/// The pages behind a memory backing: a random read of a large device is a TLB miss on 4 KiB
/// pages, and on a VM a two-level one (`docs/perf.md`, "Huge pages for the backing").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackingPages {
    /// Explicit 1 GiB pages (`MAP_HUGETLB`), taken when the administrator reserved enough
    /// (`/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages`).
    Huge1G,
    /// Explicit 2 MiB pages (`MAP_HUGETLB`; `/proc/sys/vm/nr_hugepages`).
    Huge2M,
    /// Ordinary memory with `MADV_HUGEPAGE`: 2 MiB pages where the kernel finds them.
    Transparent,
    /// A file's page cache (`--backing file:`).
    File,
    /// A sparse file's page cache (`--backing file:PATH,sparse`).
    SparseFile,
    /// No pages: nothing is kept (`--backing none`).
    None,
}

impl BackingPages {
    pub fn name(self) -> &'static str {
        match self {
            BackingPages::Huge1G => "1 GiB huge pages",
            BackingPages::Huge2M => "2 MiB huge pages",
            BackingPages::Transparent => "transparent huge pages",
            BackingPages::File => "page cache",
            BackingPages::SparseFile => "page cache of a sparse file (blocks taken on first write)",
            BackingPages::None => "nothing (no data kept: writes discarded, reads zeroes)",
        }
    }
}

/// The bytes of the emulated device.
pub struct Backing {
    /// The device's bytes; `None` for `BackingKind::None`, which keeps none.
    map: Option<MmapRaw>,
    size_bytes: u64,
    pages: BackingPages,
    file: Option<File>,
    durable: bool,
    kind: BackingKind,
    /// Remembers the first failed flush (see `flush`).
    flush_failed: FailureLatch,
    /// The first fault of a file's mapping (`mapping_fault`): the device has failed, and
    /// every later read, write and flush is refused naming it.
    failed: std::sync::OnceLock<String>,
    /// Every copy into or out of the mapping holds its range's stripes: queue pairs served on
    /// different threads copy in parallel, and copies that overlap take turns.
    locks: RangeLocks,
    /// Faults to inject (tests and campaigns only; `nvarray_faults`).
    faults: Option<Arc<BackingFaults>>,
    /// Set once the store's first failure is logged (`log_first`).
    first_logged: std::sync::OnceLock<()>,
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backing")
            .field("kind", &self.kind)
            .field("size_bytes", &self.size_bytes)
            .finish()
    }
}

impl Backing {
    /// The pages behind the device's bytes.
    pub fn pages(&self) -> BackingPages {
        self.pages
    }

    #[cfg(test)]
    pub fn open(kind: &BackingKind, size_bytes: u64) -> Result<Self, EmuError> {
        Self::open_with_faults(kind, size_bytes, None)
    }

    /// `open`, with `faults` injected into its operations (`nvarray_faults`).
    pub fn open_with_faults(
        kind: &BackingKind,
        size_bytes: u64,
        faults: Option<Arc<BackingFaults>>,
    ) -> Result<Self, EmuError> {
        let max_bytes = match kind {
            // Nothing mapped: only the byte offsets must fit.
            BackingKind::None => u64::MAX / 2,
            // Address space only, until written (x86-64 gives a process 128 TiB).
            BackingKind::File { sparse: true, .. } => SPARSE_BACKING_BYTES_MAX,
            _ => BACKING_BYTES_MAX,
        };
        if size_bytes == 0 || size_bytes > max_bytes {
            return Err(EmuError::BackingSize {
                size_bytes,
                max_bytes,
            });
        }
        let backing = match kind {
            BackingKind::None => Ok(Self::none(size_bytes)),
            BackingKind::Ram => Self::ram(size_bytes),
            BackingKind::File {
                path,
                durable,
                read_only,
                sparse,
            } => Self::file(
                path,
                size_bytes,
                (*durable, *read_only, *sparse),
                faults.as_deref(),
            ),
        };
        backing.map(|b| Backing { faults, ..b })
    }

    fn none(size_bytes: u64) -> Self {
        Backing {
            map: None,
            size_bytes,
            pages: BackingPages::None,
            file: None,
            durable: false,
            kind: BackingKind::None,
            flush_failed: FailureLatch::default(),
            failed: std::sync::OnceLock::new(),
            locks: RangeLocks::default(),
            faults: None,
            first_logged: std::sync::OnceLock::new(),
        }
    }

    fn ram(size_bytes: u64) -> Result<Self, EmuError> {
        // Every page is touched at open (`prefault`): a device larger than the memory the
        // machine has free would bring the kernel's out-of-memory killer, which may pick
        // another process, instead of an error.
        if let Some(available_bytes) = mem_available_bytes() {
            if size_bytes > available_bytes {
                return Err(EmuError::NotEnoughMemory {
                    size_bytes,
                    available_bytes,
                });
            }
        }
        let (mut map, pages) = match map_hugetlb(size_bytes) {
            Some(mapped) => mapped,
            None => (map_transparent(size_bytes)?, BackingPages::Transparent),
        };
        prefault(&mut map).map_err(|error| EmuError::Map {
            what: format!("{size_bytes} bytes of memory for the device"),
            error,
        })?;
        Ok(Backing {
            map: Some(MmapRaw::from(map)),
            size_bytes,
            pages,
            file: None,
            durable: false,
            kind: BackingKind::Ram,
            flush_failed: FailureLatch::default(),
            failed: std::sync::OnceLock::new(),
            locks: RangeLocks::default(),
            faults: None,
            first_logged: std::sync::OnceLock::new(),
        })
    }

    /// `(durable, read_only, sparse)`: as `BackingKind::File`'s.
    fn file(
        path: &Path,
        size_bytes: u64,
        (durable, read_only, sparse): (bool, bool, bool),
        faults: Option<&BackingFaults>,
    ) -> Result<Self, EmuError> {
        let io = |source| EmuError::File {
            path: path.to_path_buf(),
            source,
        };
        let file = open_claimed(path, read_only)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 && !read_only {
            file.set_len(size_bytes).map_err(io)?;
        } else if len != size_bytes {
            // Never grow or shrink an existing image silently: that would lose or invent data.
            return Err(EmuError::FileSize {
                path: path.to_path_buf(),
                file_bytes: len,
                size_bytes,
            });
        }
        let allocate = |file| match faults.and_then(|f| f.next(BackingOp::Fallocate)) {
            Some(fault) => Err(fault.error()),
            None => allocate(file, size_bytes),
        };
        if let Err(source) = (!read_only && !sparse).then(|| allocate(&file)).transpose() {
            if len == 0 {
                // The image was made just now and holds nothing: do not leave it, or the disk
                // space it took, behind.
                let _ = std::fs::remove_file(path);
            }
            return Err(EmuError::Allocate {
                path: path.to_path_buf(),
                size_bytes,
                source,
            });
        }
        let map = Self::map_file(&file, path, size_bytes, read_only)?;
        Ok(Backing {
            map: Some(map),
            size_bytes,
            file: Some(file),
            durable,
            pages: if sparse {
                BackingPages::SparseFile
            } else {
                BackingPages::File
            },
            kind: BackingKind::File {
                path: path.to_path_buf(),
                durable,
                read_only,
                sparse,
            },
            flush_failed: FailureLatch::default(),
            failed: std::sync::OnceLock::new(),
            locks: RangeLocks::default(),
            faults: None,
            first_logged: std::sync::OnceLock::new(),
        })
    }

    /// Maps `size_bytes` of the image `file` (at `path`) shared, read-only if `read_only`.
    fn map_file(
        file: &File,
        path: &Path,
        size_bytes: u64,
        read_only: bool,
    ) -> Result<MmapRaw, EmuError> {
        let mut map_options = MmapOptions::new();
        map_options.len(size_bytes as usize);
        if read_only {
            map_options.map_raw_read_only(file)
        } else {
            map_options.map_raw(file)
        }
        .map_err(|error| EmuError::Map {
            what: path.display().to_string(),
            error,
        })
    }

    fn check(&self, offset_bytes: u64, len_bytes: usize) -> Result<(), EmuError> {
        match offset_bytes.checked_add(len_bytes as u64) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(EmuError::OutOfRange {
                offset_bytes,
                len_bytes: len_bytes as u64,
                size_bytes: self.size_bytes,
            }),
        }
    }

    /// Copies `buf.len()` bytes at `offset_bytes` into `buf`.
    pub fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), EmuError> {
        self.check(offset_bytes, buf.len())?;
        self.not_failed()?;
        if let Some(fault) = self.fault(BackingOp::Read) {
            return Err(self.injected(fault, BackingOp::Read, offset_bytes, buf.len()));
        }
        let Some(map) = &self.map else {
            buf.fill(NONE_READS_AS);
            return Ok(());
        };
        let _range = self.locks.lock(offset_bytes, buf.len());
        let src = map.as_ptr().wrapping_add(offset_bytes as usize);
        if self.file.is_some() {
            // SAFETY: as below; a page the file lost faults, and the copy returns the fault.
            let copied = unsafe { mapping_fault::copy(buf.as_mut_ptr(), src, buf.len(), false) };
            return copied.map_err(|_| self.copy_fault(offset_bytes, buf.len(), false));
        }
        // SAFETY: the range is inside the mapping (checked above) and `buf` is a distinct,
        // exclusively borrowed allocation, so the regions do not overlap. The mapping is only
        // written through `write`, which holds the range's stripes as this read does, so no
        // write races with it.
        unsafe { dma_copy::copy_raw(buf.as_mut_ptr(), src, buf.len()) };
        Ok(())
    }

    /// Refuses once the device has failed.
    fn not_failed(&self) -> Result<(), EmuError> {
        match self.failed.get() {
            Some(first) => Err(EmuError::DeviceFailed {
                first: first.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The fault planned for this `op`, if any: `None` at once when nothing is injected.
    #[inline]
    fn fault(&self, op: BackingOp) -> Option<Fault> {
        self.faults.as_ref()?.next(op)
    }

    /// The error of an injected `fault` in `op` of `[offset, offset + len)`: a lost mapping
    /// fails the device as a real one does (`lost`).
    #[cold]
    fn injected(
        &self,
        fault: Fault,
        op: BackingOp,
        offset_bytes: u64,
        len_bytes: usize,
    ) -> EmuError {
        if fault == Fault::MappingLost {
            return self.lost(offset_bytes, len_bytes);
        }
        let store = match &self.kind {
            BackingKind::File { path, .. } => path.display().to_string(),
            BackingKind::Ram => "the device's memory".into(),
            BackingKind::None => "no store (--backing none)".into(),
        };
        let what = match len_bytes {
            0 => op.to_string(),
            _ => format!("{op} of {len_bytes} bytes at offset {offset_bytes}"),
        };
        let error = EmuError::InjectedFault {
            store,
            what,
            error: fault.error(),
        };
        self.log_first(&error);
        error
    }

    /// Says the store's first failure on stderr, once per device: the status a command gets
    /// cannot say what the file system said (ENOSPC, EIO, which flush).
    fn log_first(&self, error: &EmuError) {
        if self.first_logged.set(()).is_ok() {
            eprintln!(
                "nvarray: the backing store failed: {error} (the command gets an I/O error; \
                 later failures are not logged)"
            );
        }
    }

    /// The backing file's path; empty for memory.
    fn path(&self) -> PathBuf {
        match &self.kind {
            BackingKind::File { path, .. } => path.clone(),
            BackingKind::Ram | BackingKind::None => PathBuf::new(),
        }
    }

    /// A copy into (`writing`) or out of `[offset, offset + len)` faulted. A sparse file whose
    /// length is whole had no page to give: for a block never written (a write's new block,
    /// or a read of a hole on a file system that allocates for that, as tmpfs does). That
    /// command fails, and nothing else: what was written before stays, and the device goes
    /// on. Otherwise the file lost pages under the mapping (`lost`).
    fn copy_fault(&self, offset_bytes: u64, len_bytes: usize, writing: bool) -> EmuError {
        let sparse = matches!(self.kind, BackingKind::File { sparse: true, .. });
        let whole = self
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .is_some_and(|m| m.len() == self.size_bytes);
        if !(sparse && whole) {
            return self.lost(offset_bytes, len_bytes);
        }
        let error = EmuError::NoSpace {
            path: self.path(),
            what: if writing { "write" } else { "read" },
            offset_bytes,
            len_bytes: len_bytes as u64,
        };
        self.log_first(&error);
        error
    }

    /// A copy of `[offset, offset + len)` faulted: the file lost pages under the mapping. The
    /// device has failed from now on; the error for this command.
    fn lost(&self, offset_bytes: u64, len_bytes: usize) -> EmuError {
        let error = EmuError::MappingLost {
            path: self.path(),
            offset_bytes,
            len_bytes: len_bytes as u64,
        };
        if self.failed.set(error.to_string()).is_ok() {
            eprintln!("nvarray: {error}: the device has failed and refuses every later command");
        }
        error
    }

    /// Asks the CPU to bring the first `PREFETCH_MAX_BYTES` of `[offset, offset + len)` into
    /// its cache, without waiting: a small read's data then costs a cache hit when it is
    /// copied later instead of a DRAM (and often TLB) miss on the device's path.
    /// Out-of-range requests are ignored (the command is refused elsewhere).
    #[inline]
    pub fn prefetch(&self, offset_bytes: u64, len_bytes: usize) {
        let len = len_bytes.min(PREFETCH_MAX_BYTES);
        let Some(map) = &self.map else {
            return;
        };
        if self.check(offset_bytes, len).is_err() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        for line in (0..len).step_by(64) {
            // SAFETY: the address is inside the mapping (checked above); a prefetch is only a
            // hint, never faults and changes no memory.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let p = map.as_ptr().add(offset_bytes as usize + line);
                _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
            }
        }
    }

    /// Copies `data` into the device at `offset_bytes`. Refused on a read-only file (its
    /// mapping cannot be written).
    pub fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), EmuError> {
        self.check(offset_bytes, data.len())?;
        if let BackingKind::File {
            path,
            read_only: true,
            sparse: false,
            ..
        } = &self.kind
        {
            return Err(EmuError::ReadOnlyBacking { path: path.clone() });
        }
        self.not_failed()?;
        match self.fault(BackingOp::Write) {
            None => self.copy_in(offset_bytes, data),
            Some(fault) => {
                if fault == Fault::ShortWrite {
                    // The first half of its sectors lands; the command still fails.
                    self.copy_in(offset_bytes, &data[..short_write_bytes(data.len())])?;
                }
                Err(self.injected(fault, BackingOp::Write, offset_bytes, data.len()))
            }
        }
    }

    /// Copies `data` into the mapping at `offset_bytes` (checked by the caller).
    fn copy_in(&self, offset_bytes: u64, data: &[u8]) -> Result<(), EmuError> {
        let Some(map) = &self.map else {
            // Nothing is kept: the write is taken and discarded.
            return Ok(());
        };
        let _range = self.locks.lock(offset_bytes, data.len());
        let dst = map.as_mut_ptr().wrapping_add(offset_bytes as usize);
        let streaming = self.size_bytes >= STREAMING_WRITES_MIN_BYTES;
        if self.file.is_some() {
            // SAFETY: as below; a page the file lost faults, and the copy returns the fault.
            let copied = unsafe { mapping_fault::copy(dst, data.as_ptr(), data.len(), streaming) };
            return copied.map_err(|_| self.copy_fault(offset_bytes, data.len(), true));
        }
        // SAFETY: the range is inside the mapping (checked above); holding the range's
        // stripes excludes every other copy into or out of it; `data` cannot alias the
        // mapping's range because the mapping is never handed out as a slice.
        unsafe {
            if streaming {
                dma_copy::copy_raw_streaming(dst, data.as_ptr(), data.len());
            } else {
                dma_copy::copy_raw(dst, data.as_ptr(), data.len());
            }
        }
        Ok(())
    }

    /// Makes written data durable: for a durable file, `msync` and `fdatasync`; otherwise
    /// nothing is needed (RAM has nowhere to go; a shared file mapping already survives the
    /// process).
    ///
    /// Once a flush has failed, every later one fails too: Linux reports a writeback error to
    /// `fdatasync` once and then marks the pages clean, so a second `fdatasync` would succeed
    /// although the data it should cover never reached the disk.
    pub fn flush(&self) -> Result<(), EmuError> {
        self.not_failed()?;
        self.flush_failed
            .run(|| self.sync().inspect_err(|e| self.log_first(e)))
    }

    fn sync(&self) -> Result<(), EmuError> {
        if let (true, Some(file), Some(map)) = (self.durable, &self.file, &self.map) {
            let failed = |op| self.fault(op).map(|f| self.injected(f, op, 0, 0));
            let io = |source| EmuError::File {
                path: self.path(),
                source,
            };
            if let Some(e) = failed(BackingOp::Msync) {
                return Err(e);
            }
            map.flush().map_err(io)?;
            if let Some(e) = failed(BackingOp::Fsync) {
                return Err(e);
            }
            file.sync_data().map_err(io)?;
        }
        Ok(())
    }
}

/// A sector: the unit a short write lands whole (`Fault::ShortWrite`), as a disk's writes tear
/// at sector boundaries.
const SECTOR_BYTES: usize = 512;

/// What a write of `len_bytes` cut short lands: the first half of its whole sectors.
fn short_write_bytes(len_bytes: usize) -> usize {
    len_bytes / SECTOR_BYTES / 2 * SECTOR_BYTES
}

/// What a file that is not a regular file is, for a message.
fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// Held by the tests that start a child process and by those that count on a dropped
/// backing's lock being free at once: a child between its fork and its exec shares the
/// parent's open file descriptions, so it holds every OFD lock the parent held at the fork
/// until its exec closes them (CI once saw a reopen after a drop refused for that reason).
#[cfg(test)]
pub(crate) static SPAWN_OR_RELOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Opens the image at `path` (made if missing, unless `read_only`) and claims it as a device's
/// backing (`nvarray-owner`), before anything reads or sizes it: another device on it, or a
/// pool, would overwrite this one's data and this one theirs. The claim lives as long as the
/// file. Anything but a regular file is refused first.
fn open_claimed(path: &Path, read_only: bool) -> Result<File, EmuError> {
    let io = |source| EmuError::File {
        path: path.to_path_buf(),
        source,
    };
    // Mapping anything but a regular file fails with a bare "Invalid argument" (a FIFO,
    // /dev/null) or maps what is not an image (/dev/zero): say so first. (Without waiting:
    // opening a FIFO to read blocks until a writer comes.)
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() {
            return Err(EmuError::NotRegularFile {
                path: path.to_path_buf(),
                kind: file_kind(&meta.file_type()),
            });
        }
    }
    let file = if read_only {
        OpenOptions::new().read(true).open(path)
    } else {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
    }
    .map_err(io)?;
    nvarray_owner::claim(
        &file,
        nvarray_owner::Role::Device {
            writable: !read_only,
        },
    )
    .map_err(|refused| match refused {
        nvarray_owner::Refused::Held(holder) => EmuError::BackingInUse {
            path: path.to_path_buf(),
            holder: holder.to_string(),
        },
        nvarray_owner::Refused::Marked(mark) => EmuError::BackingMarked {
            path: path.to_path_buf(),
            mark: mark.to_string(),
        },
        nvarray_owner::Refused::Io(error) => EmuError::Lock {
            path: path.to_path_buf(),
            error,
        },
    })?;
    Ok(file)
}

/// Runs an operation until it first fails; from then on refuses, naming that first error.
#[derive(Debug, Default)]
struct FailureLatch {
    first: std::sync::OnceLock<String>,
}

impl FailureLatch {
    fn run(&self, op: impl FnOnce() -> Result<(), EmuError>) -> Result<(), EmuError> {
        if let Some(first) = self.first.get() {
            return Err(EmuError::FlushFailedBefore {
                first: first.clone(),
            });
        }
        op().inspect_err(|e| {
            let _ = self.first.set(e.to_string());
        })
    }
}

/// Gives every block of the image its disk space now (`fallocate`; a no-op where it already
/// has it). A sparse image makes the first write to each page wait while the file system
/// allocates it (measured up to 24 ms: NOT FAITHFUL runs), and on a full disk such a write
/// through the mapping kills the process with SIGBUS, where this fails first with a clear
/// error. File systems without `fallocate` keep the sparse file.
fn allocate(file: &std::fs::File, size_bytes: u64) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let len = libc::off_t::try_from(size_bytes)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: a valid open file descriptor; mode 0 only allocates, it changes no data.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(e);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, size_bytes);
    Ok(())
}

/// Maps `size_bytes` on explicit huge pages, the largest size the administrator reserved
/// enough free pages of for the whole device (and that divides it); None when none did, or
/// the kernel refused (the caller falls back to transparent huge pages).
fn map_hugetlb(size_bytes: u64) -> Option<(memmap2::MmapMut, BackingPages)> {
    if cfg!(miri) || !cfg!(target_os = "linux") {
        return None;
    }
    for (page_bits, pages) in [(30u8, BackingPages::Huge1G), (21, BackingPages::Huge2M)] {
        let page_bytes = 1u64 << page_bits;
        let free = free_huge_pages(page_bytes).unwrap_or(0);
        if !size_bytes.is_multiple_of(page_bytes) || free * page_bytes < size_bytes {
            continue;
        }
        if let Ok(map) = MmapOptions::new()
            .len(size_bytes as usize)
            .huge(Some(page_bits))
            .map_anon()
        {
            return Some((map, pages));
        }
    }
    None
}

/// Free explicit huge pages of `page_bytes`, from sysfs (None where it cannot be read).
fn free_huge_pages(page_bytes: u64) -> Option<u64> {
    let path = format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB/free_hugepages",
        page_bytes / 1024
    );
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Ordinary anonymous memory, with the hint to back it with transparent huge pages.
fn map_transparent(size_bytes: u64) -> Result<memmap2::MmapMut, EmuError> {
    let map = MmapOptions::new()
        .len(size_bytes as usize)
        .map_anon()
        .map_err(|error| EmuError::Map {
            what: "anonymous memory".into(),
            error,
        })?;
    // Huge pages cut TLB misses on random access; the kernel may refuse, which is fine.
    // (A hint only, so miri, which cannot run madvise, skips it.)
    #[cfg(all(target_os = "linux", not(miri)))]
    // SAFETY: the range is exactly the mapping just created; madvise only sets a hint.
    unsafe {
        libc::madvise(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            libc::MADV_HUGEPAGE,
        );
    }
    Ok(map)
}

/// Linux 5.14's `MADV_POPULATE_WRITE` (not in every libc release yet).
#[cfg(all(target_os = "linux", not(miri)))]
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Allocates every page of a fresh anonymous mapping now. Otherwise the first write to each
/// page during a run pays a page fault, and with huge pages the kernel may compact memory in
/// that fault for milliseconds (measured: 4 KB random writes over 1 GiB at 5 ms each): a cost
/// no real device has, which would make the run unfaithful.
fn prefault(map: &mut memmap2::MmapMut) -> std::io::Result<()> {
    // (miri cannot run madvise; it touches the pages below.)
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: the range is exactly the mapping, which is ours and writable; populating
        // only allocates zero pages, which is what the mapping reads as anyway.
        let rc = unsafe {
            libc::madvise(
                map.as_ptr() as *mut libc::c_void,
                map.len(),
                MADV_POPULATE_WRITE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        // Only a kernel without MADV_POPULATE_WRITE (before 5.14) falls back to touching
        // pages; any other failure (out of memory) is reported.
        if error.raw_os_error() != Some(libc::EINVAL) {
            return Err(error);
        }
    }
    // Older kernels: touch one byte per page. The mapping is zero-filled, so writing zero
    // changes no data. (This wrote through a pointer taken from a shared borrow of the map,
    // which miri reported as undefined behaviour; the map is borrowed mutably now.)
    for offset in (0..map.len()).step_by(4096) {
        map[offset] = 0;
    }
    Ok(())
}

/// `MemAvailable` of `/proc/meminfo`: memory the machine can give without swapping. `None`
/// where it cannot be read.
fn mem_available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("nvarray-backing-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// Truncates the file under whatever maps it (another process's `truncate`).
    fn truncate(path: &Path, len_bytes: u64) {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.set_len(len_bytes).unwrap();
    }

    fn durable_file(path: &Path) -> BackingKind {
        BackingKind::File {
            path: path.to_path_buf(),
            durable: true,
            read_only: false,
            sparse: false,
        }
    }

    fn faulty(kind: &BackingKind, size: u64, plan: &str) -> Result<Backing, EmuError> {
        let faults = Arc::new(BackingFaults::parse(plan).unwrap());
        Backing::open_with_faults(kind, size, Some(faults))
    }

    fn read_back(b: &Backing, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        b.read(offset, &mut buf).unwrap();
        buf
    }

    /// An injected ENOSPC, EDQUOT or EIO fails that write and changes nothing; the writes
    /// around it land, and the device has not failed.
    fn sparse(path: &Path) -> BackingKind {
        BackingKind::File {
            path: path.to_path_buf(),
            durable: false,
            read_only: false,
            sparse: true,
        }
    }

    #[test]
    fn a_sparse_file_takes_blocks_as_they_are_written_and_may_outgrow_the_limit() {
        use std::os::unix::fs::MetadataExt;
        let path = scratch("sparse-big");
        let _ = std::fs::remove_file(&path);
        // 2 TiB: past a mapped backing's 1 TiB, and far more than this disk holds.
        let size = 2u64 << 40;
        let b = Backing::open(&sparse(&path), size).unwrap();
        assert_eq!(b.pages(), BackingPages::SparseFile);
        let blocks_at_open = std::fs::metadata(&path).unwrap().blocks();
        assert!(blocks_at_open < 64, "{blocks_at_open} blocks taken at open");
        b.write(size / 2, &[7u8; 1 << 20]).unwrap();
        let mut back = vec![0u8; 1 << 20];
        b.read(size / 2, &mut back).unwrap();
        assert!(back.iter().all(|&x| x == 7));
        b.flush().unwrap();
        let blocks = std::fs::metadata(&path).unwrap().blocks();
        assert!(
            blocks >= 2048,
            "the written MiB has its blocks: {blocks} x 512 B"
        );
        drop(b);
        std::fs::remove_file(&path).unwrap();
    }

    /// Root mounts a small tmpfs here (and removes it when dropped, panics included). By
    /// `mount(2)` itself, not the `mount` program: a child forked while another test holds a
    /// backing's lock would hold it too for an instant, and that test would see it taken.
    struct SmallTmpfs(PathBuf);

    impl SmallTmpfs {
        fn mount(bytes: u64) -> Option<SmallTmpfs> {
            use std::ffi::CString;
            use std::os::unix::ffi::OsStrExt;
            let dir = scratch("small-tmpfs");
            std::fs::create_dir_all(&dir).ok()?;
            let target = CString::new(dir.as_os_str().as_bytes()).ok()?;
            let options = CString::new(format!("size={bytes}")).ok()?;
            // SAFETY: every pointer is a live NUL-terminated string for the call's duration.
            let rc = unsafe {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    options.as_ptr().cast(),
                )
            };
            if rc != 0 {
                let _ = std::fs::remove_dir(&dir);
                return None;
            }
            Some(SmallTmpfs(dir))
        }
    }

    impl Drop for SmallTmpfs {
        fn drop(&mut self) {
            use std::os::unix::ffi::OsStrExt;
            if let Ok(target) = std::ffi::CString::new(self.0.as_os_str().as_bytes()) {
                // SAFETY: a live NUL-terminated path; MNT_DETACH takes the mount away even if
                // something still has a file open in it.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn a_full_file_system_fails_one_write_of_a_sparse_backing_and_loses_nothing() {
        let Some(fs) = SmallTmpfs::mount(1 << 20) else {
            eprintln!("SKIPPED (not passed): mounting a 1 MiB tmpfs needs root");
            return;
        };
        let path = fs.0.join("d.img");
        let size = 16u64 << 20;
        let b = Backing::open(&sparse(&path), size).unwrap();
        let block = 64 * 1024;
        let mut written = 0u64;
        let refused = loop {
            let at = written * block as u64;
            assert!(at < size, "16 MiB fitted in a 1 MiB tmpfs");
            match b.write(at, &vec![written as u8 + 1; block]) {
                Ok(()) => written += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(refused, EmuError::NoSpace { .. }), "{refused}");
        // A MiB of tmpfs holds 16 of the 64 KiB blocks, not the device's 256.
        assert!(
            written > 0 && written < size / block as u64,
            "{written} blocks fitted"
        );
        // Every write that returned is there, and the device goes on.
        let mut back = vec![0u8; block];
        for n in 0..written {
            b.read(n * block as u64, &mut back).unwrap();
            assert!(back.iter().all(|&x| x == n as u8 + 1), "block {n}");
        }
        b.write(0, &vec![0xee; block]).unwrap();
        b.flush().unwrap();
    }

    #[test]
    fn none_keeps_nothing_costs_nothing_and_still_checks_ranges() {
        // 64 TiB: past every mapped backing's limit, and nothing is allocated.
        let size = 64u64 << 40;
        let b = Backing::open(&BackingKind::None, size).unwrap();
        assert_eq!(b.pages(), BackingPages::None);
        b.write(size - 4096, &[0xab; 4096]).unwrap();
        let mut back = [0xffu8; 4096];
        b.read(size - 4096, &mut back).unwrap();
        assert!(
            back.iter().all(|&x| x == NONE_READS_AS),
            "a read returns zeroes"
        );
        assert!(b.write(size - 4095, &[1; 4096]).is_err(), "past the end");
        assert!(b.read(size, &mut back).is_err(), "past the end");
        b.prefetch(size - 4096, 4096);
        b.flush().unwrap();
    }

    #[test]
    fn an_injected_write_error_fails_that_write_only_and_changes_nothing() {
        for fault in ["enospc", "edquot", "eio"] {
            let b = faulty(&BackingKind::Ram, 1 << 16, &format!("write#2={fault}")).unwrap();
            b.write(0, &[1; 4096]).unwrap();
            let e = b.write(4096, &[2; 4096]).unwrap_err();
            assert!(matches!(e, EmuError::InjectedFault { .. }), "{e}");
            assert!(
                e.to_string().contains("write of 4096 bytes at offset 4096"),
                "{e}"
            );
            assert_eq!(
                read_back(&b, 4096, 4096),
                vec![0; 4096],
                "{fault}: nothing landed"
            );
            b.write(8192, &[3; 4096]).unwrap();
            assert_eq!(read_back(&b, 0, 4096), vec![1; 4096]);
            assert_eq!(read_back(&b, 8192, 4096), vec![3; 4096]);
        }
    }

    /// A short write lands the first half of its sectors and still fails.
    #[test]
    fn a_short_write_lands_its_first_half_and_fails() {
        let b = faulty(&BackingKind::Ram, 1 << 16, "write#1=short,write#2=short").unwrap();
        assert!(b.write(0, &[7; 4096]).is_err());
        let back = read_back(&b, 0, 4096);
        assert_eq!(back[..2048], [7; 2048]);
        assert_eq!(back[2048..], [0; 2048]);
        // Three sectors: one lands, whole.
        assert!(b.write(8192, &[8; 1536]).is_err());
        let back = read_back(&b, 8192, 1536);
        assert_eq!(back[..512], [8; 512]);
        assert_eq!(back[512..], [0; 1024]);
    }

    /// The "fsyncgate" case: an fsync (or msync) that fails once succeeds when called again,
    /// but the data it should have covered may be gone: every later flush must fail.
    #[test]
    fn an_fsync_that_fails_once_fails_every_later_flush() {
        for op in ["fsync", "msync"] {
            let path = scratch(&format!("fsyncgate-{op}"));
            let b = faulty(&durable_file(&path), 1 << 16, &format!("{op}#2=eio")).unwrap();
            b.write(0, &[1; 512]).unwrap();
            b.flush().unwrap();
            b.write(0, &[2; 512]).unwrap();
            let first = b.flush().unwrap_err();
            assert!(first.to_string().contains(op), "{first}");
            for _ in 0..3 {
                let later = b.flush().unwrap_err();
                assert!(
                    matches!(later, EmuError::FlushFailedBefore { .. }),
                    "{later}"
                );
            }
            drop(b);
            let _ = std::fs::remove_file(&path);
        }
    }

    /// A fallocate that fails (a full file system) refuses the device before anything is
    /// mapped, and a new image is not left behind.
    #[test]
    fn a_failed_fallocate_refuses_the_device_and_leaves_no_image() {
        let path = scratch("fallocate");
        let e = faulty(&durable_file(&path), 1 << 16, "fallocate#1=enospc").unwrap_err();
        assert!(matches!(e, EmuError::Allocate { .. }), "{e}");
        assert!(e.to_string().contains("No space left"), "{e}");
        assert!(!path.exists());
    }

    /// An injected lost mapping fails the device, as a real one (below) does.
    #[test]
    fn an_injected_lost_mapping_fails_the_device() {
        let b = faulty(&BackingKind::Ram, 1 << 16, "read#2=lost").unwrap();
        read_back(&b, 0, 512);
        assert!(matches!(
            b.read(0, &mut [0; 512]).unwrap_err(),
            EmuError::MappingLost { .. }
        ));
        assert!(matches!(
            b.write(0, &[1; 512]).unwrap_err(),
            EmuError::DeviceFailed { .. }
        ));
    }

    /// A file truncated under a running device (issue 58: the server died of SIGBUS): the
    /// read and the write of the lost range fail with the fault, and from then on the device
    /// has failed: a read of a range still there, and a flush, are refused naming it.
    #[test]
    fn a_file_that_loses_its_pages_fails_the_command_and_then_the_device() {
        let path = scratch("truncated");
        let size = 1 << 20;
        let kind = BackingKind::File {
            path: path.clone(),
            durable: true,
            read_only: false,
            sparse: false,
        };
        let b = Backing::open(&kind, size).unwrap();
        b.write(0, &[5u8; 4096]).unwrap();
        truncate(&path, 64 << 10);
        let mut buf = vec![0u8; 4096];
        let e = b.read(512 << 10, &mut buf).unwrap_err();
        assert!(
            matches!(e, EmuError::MappingLost { offset_bytes, .. } if offset_bytes == 512 << 10),
            "{e}"
        );
        assert!(e.to_string().contains("truncated"), "{e}");
        for e in [
            b.read(0, &mut buf).unwrap_err(),
            b.write(768 << 10, &[1u8; 4096]).unwrap_err(),
            b.flush().unwrap_err(),
        ] {
            assert!(matches!(e, EmuError::DeviceFailed { .. }), "{e}");
            assert!(
                e.to_string().contains("524288"),
                "names the first fault: {e}"
            );
        }
        drop(b);
        std::fs::remove_file(&path).unwrap();
    }

    /// A write into a lost page is the fault too (streaming stores or not).
    #[test]
    fn a_write_into_a_page_the_file_lost_fails() {
        for size in [1u64 << 20, STREAMING_WRITES_MIN_BYTES] {
            let path = scratch(&format!("lost-write-{size}"));
            let kind = BackingKind::File {
                path: path.clone(),
                durable: false,
                read_only: false,
                sparse: false,
            };
            let b = Backing::open(&kind, size).unwrap();
            truncate(&path, 4096);
            let e = b.write(size - 8192, &[3u8; 8192]).unwrap_err();
            assert!(matches!(e, EmuError::MappingLost { .. }), "{e}");
            drop(b);
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn a_failed_flush_fails_every_later_flush() {
        let latch = FailureLatch::default();
        assert!(latch.run(|| Ok(())).is_ok());
        let failing = || {
            Err(EmuError::File {
                path: "image".into(),
                source: std::io::Error::from_raw_os_error(libc::EIO),
            })
        };
        assert!(matches!(latch.run(failing), Err(EmuError::File { .. })));
        // The next fdatasync would succeed (the kernel reports a writeback error once).
        let e = latch.run(|| Ok(())).unwrap_err();
        assert!(matches!(e, EmuError::FlushFailedBefore { .. }));
        assert!(e.to_string().contains("image"), "{e}");
    }

    #[test]
    fn a_ram_device_larger_than_free_memory_is_refused() {
        let available = mem_available_bytes().expect("Linux has /proc/meminfo");
        let size = (available + (1 << 30)).min(BACKING_BYTES_MAX);
        if size <= available {
            return; // A machine with more than BACKING_BYTES_MAX free: nothing to refuse.
        }
        let e = Backing::open(&BackingKind::Ram, size).unwrap_err();
        assert!(matches!(e, EmuError::NotEnoughMemory { .. }), "{e}");
        assert!(e.is_input_error());
        assert!(e.to_string().contains("--backing file:"), "{e}");
    }

    #[test]
    fn ram_reads_back_what_was_written() {
        let b = Backing::open(&BackingKind::Ram, 1 << 20).unwrap();
        b.write(4096, b"hello").unwrap();
        let mut buf = [0u8; 5];
        b.read(4096, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
    }

    #[test]
    fn out_of_range_is_refused_and_changes_nothing() {
        let b = Backing::open(&BackingKind::Ram, 8192).unwrap();
        b.write(8190, b"ab").unwrap();
        for (offset, len) in [
            (8191u64, 2usize),
            (8192, 1),
            (u64::MAX, 1),
            (u64::MAX - 1, 4),
        ] {
            assert!(
                b.write(offset, &vec![7u8; len]).is_err(),
                "write {offset}+{len}"
            );
            assert!(
                b.read(offset, &mut vec![0u8; len]).is_err(),
                "read {offset}+{len}"
            );
        }
        let mut buf = [0u8; 2];
        b.read(8190, &mut buf).unwrap();
        assert_eq!(&buf, b"ab");
    }

    #[test]
    fn a_new_file_image_has_all_its_blocks_allocated() {
        use std::os::unix::fs::MetadataExt;
        let path = scratch("allocated");
        let kind = BackingKind::File {
            path: path.clone(),
            durable: false,
            read_only: false,
            sparse: false,
        };
        let b = Backing::open(&kind, 1 << 20).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 1 << 20);
        assert!(
            meta.blocks() * 512 >= 1 << 20,
            "sparse image: {} bytes allocated",
            meta.blocks() * 512
        );
        drop(b);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_file_keeps_its_data_across_opens_and_refuses_a_size_change() {
        let _alone = SPAWN_OR_RELOCK.lock().unwrap_or_else(|e| e.into_inner());
        let path = scratch("reopen");
        let kind = BackingKind::File {
            path: path.clone(),
            durable: true,
            read_only: false,
            sparse: false,
        };
        {
            let b = Backing::open(&kind, 1 << 16).unwrap();
            b.write(512, b"persist").unwrap();
            b.flush().unwrap();
        }
        let b = Backing::open(&kind, 1 << 16).unwrap();
        let mut buf = [0u8; 7];
        b.read(512, &mut buf).unwrap();
        assert_eq!(&buf, b"persist");
        // (Closed first: while open, the file is locked and any other open is refused.)
        drop(b);
        let e = Backing::open(&kind, 1 << 17).unwrap_err().to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("65536"),
            "{e}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    /// A second device on a file already backing one is refused, naming the holder, and
    /// nothing of the file changes; once the first is closed the file opens again.
    #[test]
    fn a_file_backing_one_device_is_refused_to_a_second() {
        let _alone = SPAWN_OR_RELOCK.lock().unwrap_or_else(|e| e.into_inner());
        let path = scratch("in-use");
        let kind = BackingKind::File {
            path: path.clone(),
            durable: false,
            read_only: false,
            sparse: false,
        };
        let first = Backing::open(&kind, 1 << 16).unwrap();
        first.write(0, b"first").unwrap();
        let e = Backing::open(&kind, 1 << 16).unwrap_err();
        assert!(matches!(e, EmuError::BackingInUse { .. }), "{e}");
        assert!(e.is_input_error());
        let message = e.to_string();
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        // A size the file does not have: still "in use", and the file keeps its size.
        assert!(matches!(
            Backing::open(&kind, 1 << 17).unwrap_err(),
            EmuError::BackingInUse { .. }
        ));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 16);
        drop(first);
        let again = Backing::open(&kind, 1 << 16).unwrap();
        let mut buf = [0u8; 5];
        again.read(0, &mut buf).unwrap();
        assert_eq!(&buf, b"first");
        drop(again);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn zero_and_oversized_stores_are_refused() {
        assert!(Backing::open(&BackingKind::Ram, 0).is_err());
        assert!(Backing::open(&BackingKind::Ram, BACKING_BYTES_MAX + 1).is_err());
    }
}
