//! A channel's shared memory, as both sides see it: one memfd the daemon creates and passes
//! to the client, laid out as
//!
//! ```text
//! 0      Geometry (written once by the daemon before the client has it; never read back)
//! 128    sq_tail   client → daemon: commands written up to here      (own cache line each)
//! 192    cq_head   client → daemon: completions consumed up to here
//! 256    sq_head   daemon → client: commands taken up to here
//! 320    cq_tail   daemon → client: completions posted up to here
//! 384    sleeping  daemon → client: nonzero while the daemon may be asleep (write a byte to
//!                  the socket after making a command visible)
//! 448    closed    daemon → client: nonzero once the daemon has dropped the channel
//! 512    waiting   client → daemon: nonzero while the client sleeps on `cq_tail` (a futex),
//!                  so the daemon wakes it after posting
//! 4096   submission ring: ring_entries × SqEntry (32 B)
//!        completion ring: ring_entries × CqEntry (8 B)
//! page   DMA region: buffer_bytes, where commands' data lives
//! ```
//!
//! The counters are free-running `u32`s (an index is the counter modulo `ring_entries`, a
//! power of two), as NVMe's doorbells are head and tail. The client owns everything it can
//! write: the daemon keeps its own copies of the geometry and of its counters, reads each
//! ring entry once into a local copy before checking it, and touches the region only through
//! atomics and raw copies, so a client scribbling on its memory can fail its own commands and
//! nothing else.

use std::sync::atomic::AtomicU32;

/// `Geometry::magic`: "NVACHAN1".
pub const MAGIC: u64 = u64::from_le_bytes(*b"NVACHAN1");
/// The version of this layout and of the socket messages (`hello`); `NVARRAY_ABI_VERSION` in
/// `native/include/nvarray.h` follows it.
pub const VERSION: u32 = 2;
/// The first page holds the geometry and the counters.
pub const HEADER_BYTES: u64 = 4096;
pub const PAGE_BYTES: u64 = 4096;
/// Most commands in flight on one channel.
pub const QUEUE_DEPTH_MAX: u32 = 1024;
/// A channel's queue depth when the client asks for none.
pub const QUEUE_DEPTH_DEFAULT: u32 = 64;
/// The largest DMA region a client may ask for.
pub const BUFFER_BYTES_MAX: u64 = 1 << 30;

pub const SQ_TAIL: usize = 128;
pub const CQ_HEAD: usize = 192;
pub const SQ_HEAD: usize = 256;
pub const CQ_TAIL: usize = 320;
pub const SLEEPING: usize = 384;
pub const CLOSED: usize = 448;
pub const WAITING: usize = 512;

/// Opcodes of `SqEntry::op`.
pub const OP_READ: u32 = 0;
pub const OP_WRITE: u32 = 1;
pub const OP_FLUSH: u32 = 2;
/// Deallocate `[offset, offset + len)` (fio's trim): flash behind an FTL unmaps the pages
/// wholly inside it (the device's deallocate, docs/flash.md). Carries no data.
pub const OP_TRIM: u32 = 3;
/// A zoned namespace's report zones (`Geometry::zone_bytes` > 0): the zones from the one
/// holding `offset`, into the `len` bytes at `buf`, in the NVMe ZNS layout (a 64-byte
/// header whose first 8 bytes count the zones reported, then 64 bytes a zone).
pub const OP_ZONE_REPORT: u32 = 4;
/// Zone management on the zone starting at `offset` (no data): reset its write pointer,
/// finish it (full), open it explicitly, or close it.
pub const OP_ZONE_RESET: u32 = 5;
pub const OP_ZONE_FINISH: u32 = 6;
pub const OP_ZONE_OPEN: u32 = 7;
pub const OP_ZONE_CLOSE: u32 = 8;

/// What a channel is: its rings' and region's sizes and places, and the device's limits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Geometry {
    pub magic: u64,
    pub version: u32,
    /// Most commands in flight: a command's `id` is below it.
    pub queue_depth: u32,
    /// Entries of each ring (a power of two, at least `queue_depth`).
    pub ring_entries: u32,
    pub block_bytes: u32,
    pub command_bytes_max: u32,
    pub reserved: u32,
    pub size_bytes: u64,
    pub buffer_bytes: u64,
    pub sq_offset: u64,
    pub cq_offset: u64,
    pub data_offset: u64,
    pub map_bytes: u64,
    /// A zoned namespace's zone size and writable capacity per zone, in bytes (both 0: the
    /// namespace is not zoned), and its open and active zone limits (0: none).
    pub zone_bytes: u64,
    pub zone_capacity_bytes: u64,
    pub max_open_zones: u32,
    pub max_active_zones: u32,
}

/// One command, as the client writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqEntry {
    /// `OP_READ`, `OP_WRITE`, `OP_FLUSH`, `OP_TRIM` or, on a zoned namespace, `OP_ZONE_*`.
    pub op: u32,
    /// The client's name for the command, below `queue_depth` and unique among its commands
    /// in flight; the completion carries it back.
    pub id: u32,
    pub offset: u64,
    pub len: u32,
    pub reserved: u32,
    /// Where its data is: an offset into the DMA region.
    pub buf: u64,
}

/// One completion, as the daemon posts it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqEntry {
    pub id: u32,
    /// A `ChannelStatus` code.
    pub status: u32,
}

const _: () = assert!(std::mem::size_of::<Geometry>() <= SQ_TAIL);
// The last counter's cache line is inside the header, before the submission ring.
const _: () = assert!(WAITING + 64 <= HEADER_BYTES as usize);
// `geometry` takes the default without clamping it.
const _: () = assert!(QUEUE_DEPTH_DEFAULT <= QUEUE_DEPTH_MAX);
// A region clamped to the most and then rounded up to pages stays within the most.
const _: () = assert!(BUFFER_BYTES_MAX.is_multiple_of(PAGE_BYTES));
const _: () = assert!(std::mem::size_of::<SqEntry>() == 32);
const _: () = assert!(std::mem::size_of::<CqEntry>() == 8);

impl Geometry {
    /// The layout of a channel of `queue_depth` commands and a region of `buffer_bytes`
    /// (rounded up to pages) on a device of these limits.
    pub fn new(
        queue_depth: u32,
        buffer_bytes: u64,
        block_bytes: u32,
        command_bytes_max: u32,
        size_bytes: u64,
    ) -> Geometry {
        let ring_entries = queue_depth.next_power_of_two().max(2);
        let sq_offset = HEADER_BYTES;
        let cq_offset = sq_offset + u64::from(ring_entries) * 32;
        let data_offset = (cq_offset + u64::from(ring_entries) * 8).next_multiple_of(PAGE_BYTES);
        let buffer_bytes = buffer_bytes.next_multiple_of(PAGE_BYTES);
        Geometry {
            magic: MAGIC,
            version: VERSION,
            queue_depth,
            ring_entries,
            block_bytes,
            command_bytes_max,
            reserved: 0,
            size_bytes,
            buffer_bytes,
            sq_offset,
            cq_offset,
            data_offset,
            map_bytes: data_offset + buffer_bytes,
            zone_bytes: 0,
            zone_capacity_bytes: 0,
            max_open_zones: 0,
            max_active_zones: 0,
        }
    }

    /// This geometry with `other`'s zones.
    pub fn with_zones_of(self, other: &Geometry) -> Geometry {
        Geometry {
            zone_bytes: other.zone_bytes,
            zone_capacity_bytes: other.zone_capacity_bytes,
            max_open_zones: other.max_open_zones,
            max_active_zones: other.max_active_zones,
            ..self
        }
    }

    /// Whether a geometry read from a mapping of `map_bytes` is one this version wrote:
    /// what a client checks before it trusts the offsets.
    pub fn is_valid(&self, map_bytes: u64) -> bool {
        // The ranges first: `Geometry::new` on values past them would overflow (a header
        // written by a hostile or broken daemon is read here).
        if !(1..=QUEUE_DEPTH_MAX).contains(&self.queue_depth)
            || self.buffer_bytes > BUFFER_BYTES_MAX
            || self.block_bytes == 0
            || self.command_bytes_max < self.block_bytes
        {
            return false;
        }
        let expected = Geometry::new(
            self.queue_depth,
            self.buffer_bytes,
            self.block_bytes,
            self.command_bytes_max,
            self.size_bytes,
        )
        .with_zones_of(self);
        let zones_fit = self.zone_capacity_bytes <= self.zone_bytes
            && (self.zone_bytes == 0 || self.size_bytes.is_multiple_of(self.zone_bytes));
        *self == expected && zones_fit && self.map_bytes == map_bytes
    }
}

/// A channel's mapping. Every access is through an atomic or a raw copy: the other process
/// writes the same memory at any time.
pub struct Region {
    map: memmap2::MmapRaw,
    geometry: Geometry,
}

// SAFETY: the mapping is plain shared memory, accessed only through atomics and raw copies;
// moving the owner between threads changes nothing about that.
unsafe impl Send for Region {}

impl Region {
    /// Maps `file` (at least `geometry.map_bytes` long) shared, read-write.
    pub fn map(file: &std::fs::File, geometry: Geometry) -> std::io::Result<Region> {
        let map = memmap2::MmapOptions::new()
            .len(geometry.map_bytes as usize)
            .map_raw(file)?;
        Ok(Region { map, geometry })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The counter at byte `at` of the header (`SQ_TAIL`, ...).
    pub fn word(&self, at: usize) -> &AtomicU32 {
        debug_assert!(at.is_multiple_of(64) && at < HEADER_BYTES as usize);
        // SAFETY: `at` is one of the header's cache-line-aligned counter offsets, inside the
        // mapping, which lives as long as `self`; AtomicU32 has u32's layout and any bit
        // pattern is a valid u32.
        unsafe { &*self.map.as_mut_ptr().add(at).cast::<AtomicU32>() }
    }

    /// Wakes a process sleeping on the counter at `at` (`futex_wait`), across processes: the
    /// memfd is shared, so the kernel keys the futex by its page, not by an address space.
    pub fn wake(&self, at: usize) {
        let word = self.word(at);
        // SAFETY: FUTEX_WAKE on a live, aligned u32 of our mapping; it only reads the address.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1, 0, 0, 0);
        }
    }

    /// Sleeps while the counter at `at` still holds `expected`, at most `timeout`.
    pub fn sleep_while(&self, at: usize, expected: u32, timeout: std::time::Duration) {
        let word = self.word(at);
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a live, aligned u32 of our mapping with a valid timespec; the
        // kernel returns at once if the word no longer holds `expected`.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &ts,
                0,
                0,
            );
        }
    }

    /// Writes the geometry into the header (the daemon, before the client has the memfd).
    pub fn write_geometry(&self) {
        // SAFETY: the header starts the mapping and holds a Geometry (asserted above).
        unsafe {
            std::ptr::write_volatile(self.map.as_mut_ptr().cast::<Geometry>(), self.geometry)
        };
    }

    /// The geometry as written in the header (the client, before it trusts any offset).
    pub fn read_geometry(file: &std::fs::File) -> std::io::Result<Geometry> {
        let len = file.metadata()?.len();
        if len < HEADER_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "channel memory shorter than its header",
            ));
        }
        let map = memmap2::MmapOptions::new()
            .len(HEADER_BYTES as usize)
            .map_raw_read_only(file)?;
        // SAFETY: the mapping is HEADER_BYTES long, enough for a Geometry of plain integers.
        let g = unsafe { std::ptr::read_volatile(map.as_ptr().cast::<Geometry>()) };
        if !g.is_valid(len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "channel memory holds no geometry of this version",
            ));
        }
        Ok(g)
    }

    fn ring_index(&self, counter: u32) -> u64 {
        u64::from(counter & (self.geometry.ring_entries - 1))
    }

    /// The submission entry at `counter` (modulo the ring), copied once.
    pub fn read_sq(&self, counter: u32) -> SqEntry {
        let at = self.geometry.sq_offset + self.ring_index(counter) * 32;
        // SAFETY: the index is inside the ring, which is inside the mapping; SqEntry is plain
        // integers, so whatever the client wrote is a valid value.
        unsafe { std::ptr::read_volatile(self.map.as_mut_ptr().add(at as usize).cast()) }
    }

    pub fn write_sq(&self, counter: u32, entry: SqEntry) {
        let at = self.geometry.sq_offset + self.ring_index(counter) * 32;
        // SAFETY: as `read_sq`.
        unsafe { std::ptr::write_volatile(self.map.as_mut_ptr().add(at as usize).cast(), entry) };
    }

    pub fn read_cq(&self, counter: u32) -> CqEntry {
        let at = self.geometry.cq_offset + self.ring_index(counter) * 8;
        // SAFETY: as `read_sq`, for the completion ring.
        unsafe { std::ptr::read_volatile(self.map.as_mut_ptr().add(at as usize).cast()) }
    }

    pub fn write_cq(&self, counter: u32, entry: CqEntry) {
        let at = self.geometry.cq_offset + self.ring_index(counter) * 8;
        // SAFETY: as `read_sq`, for the completion ring.
        unsafe { std::ptr::write_volatile(self.map.as_mut_ptr().add(at as usize).cast(), entry) };
    }

    /// Whether `[buf, buf + len)` lies inside the DMA region.
    pub fn holds(&self, buf: u64, len: u64) -> bool {
        buf.checked_add(len)
            .is_some_and(|end| end <= self.geometry.buffer_bytes)
    }

    /// The DMA region's first byte.
    pub fn data(&self) -> *mut u8 {
        // SAFETY: data_offset is inside the mapping (Geometry::new).
        unsafe {
            self.map
                .as_mut_ptr()
                .add(self.geometry.data_offset as usize)
        }
    }

    /// Copies `dst.len()` bytes from the DMA region at `buf` (checked: `holds`).
    pub fn copy_out(&self, buf: u64, dst: &mut [u8]) {
        assert!(
            self.holds(buf, dst.len() as u64),
            "copy outside the DMA region"
        );
        // SAFETY: the source range is inside the mapping (asserted) and cannot overlap `dst`,
        // which is our own memory. The other process may write the range meanwhile: bytes
        // have no invalid values, so at worst the copy is torn, which only its writer sees.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.data().add(buf as usize),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
    }

    /// Copies `src` into the DMA region at `buf` (checked: `holds`).
    pub fn copy_in(&self, buf: u64, src: &[u8]) {
        assert!(
            self.holds(buf, src.len() as u64),
            "copy outside the DMA region"
        );
        // SAFETY: as `copy_out`, in the other direction.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data().add(buf as usize), src.len())
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header from a hostile or broken daemon is refused, never overflowed on: the ranges
    /// are checked before the offsets are computed from them.
    #[test]
    fn a_geometry_past_the_ranges_is_refused_without_overflow() {
        let good = Geometry::new(32, 1 << 20, 512, 128 << 10, 1 << 30);
        assert!(good.is_valid(good.map_bytes));
        let hostile = [
            Geometry {
                queue_depth: u32::MAX,
                ..good
            },
            Geometry {
                buffer_bytes: u64::MAX,
                ..good
            },
            Geometry {
                block_bytes: 0,
                ..good
            },
            Geometry {
                command_bytes_max: 256,
                ..good
            },
        ];
        for g in hostile {
            assert!(!g.is_valid(g.map_bytes), "{g:?}");
        }
    }
}
