//! One virtio-blk request, judged: the only place a guest's descriptor chain is read. A chain
//! is its descriptors in order (address, length, whether the device writes it); the request is
//! a 16-byte header (type, reserved, sector) the device reads, the data, and a status byte the
//! device writes, laid out in any way (`VIRTIO_F_ANY_LAYOUT`: a header may span descriptors
//! and share one with data). Every descriptor is checked to lie inside the guest's memory
//! before any byte of it is read, and every later access goes through `vm-memory`, which
//! checks again: nothing outside the guest's regions is ever touched.
//!
//! A request that breaks a rule fails alone: with `VIRTIO_BLK_S_IOERR` (or `_UNSUPP` for a
//! type the device does not offer) in its status byte when the chain has one the device may
//! write, and with nothing written at all when it does not.

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_DISCARD, VIRTIO_BLK_T_FLUSH,
    VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_WRITE_ZEROES,
    VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP,
};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend};

use crate::virtio_blk::{
    QUEUE_SIZE_MAX, RANGES_MAX, RANGE_SECTORS_MAX, REQUEST_BYTES_MAX, SECTOR_BYTES,
};

/// Bytes of a request's header (`struct virtio_blk_outhdr`).
pub const HEADER_BYTES: usize = 16;

/// Bytes of one discard or write-zeroes range (`struct virtio_blk_discard_write_zeroes`).
pub const RANGE_BYTES: u64 = 16;

/// One descriptor of a chain, as the driver wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub addr: u64,
    pub len: u32,
    /// The device writes it (`VIRTQ_DESC_F_WRITE`); otherwise the device reads it.
    pub writable: bool,
}

/// A run of guest memory holding part of a request's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub addr: GuestAddress,
    pub len: u32,
}

/// What the request asks of the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Flush,
    GetId,
    /// Ranges (byte offset, bytes) to deallocate.
    Discard(Vec<(u64, u64)>),
    /// Ranges (byte offset, bytes) to fill with zeroes.
    WriteZeroes(Vec<(u64, u64)>),
}

/// A request that passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlkRequest {
    pub kind: Kind,
    /// Where a read or write starts on the device, in bytes.
    pub offset_bytes: u64,
    /// The data between header and status: a read's or GET_ID's destination, a write's source.
    pub data: Vec<Segment>,
    pub data_bytes: u64,
    /// The status byte.
    pub status: GuestAddress,
}

/// A request refused, and how to answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The status byte to write `code` into; `None` when the chain has no byte the device may
    /// write at its end (the request is returned with nothing written).
    pub status: Option<GuestAddress>,
    /// `VIRTIO_BLK_S_IOERR` or `VIRTIO_BLK_S_UNSUPP`.
    pub code: u8,
    pub why: &'static str,
}

/// The disk a request is judged against.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub capacity_bytes: u64,
    pub block_bytes: u32,
    pub read_only: bool,
}

/// A chain's descriptors as the back end takes them from the queue (`virtio-queue` has
/// checked each link against the queue's size and followed indirect tables).
pub fn descriptors_of<M>(chain: virtio_queue::DescriptorChain<M>) -> Vec<Descriptor>
where
    M: std::ops::Deref,
    M::Target: vm_memory::GuestMemory,
{
    chain
        .map(|d| Descriptor {
            addr: d.addr().0,
            len: d.len(),
            writable: d.is_write_only(),
        })
        .collect()
}

/// Judges the chain `descriptors` against `limits` in the guest memory `mem`.
pub fn parse<M: GuestMemoryBackend>(
    mem: &M,
    descriptors: &[Descriptor],
    limits: &Limits,
) -> Result<BlkRequest, Refused> {
    let status = check_descriptors(mem, descriptors)?;
    let refuse = |code: u32, why| Refused {
        status: Some(status),
        code: code as u8,
        why,
    };
    let ioerr = |why| refuse(VIRTIO_BLK_S_IOERR, why);

    let bytes = Run::of(descriptors);
    let header_end = HEADER_BYTES as u64;
    let (kind, sector) = read_header(mem, &bytes).map_err(ioerr)?;
    let data_bytes = bytes.total - 1 - header_end;
    let device_writes = matches!(kind, VIRTIO_BLK_T_IN | VIRTIO_BLK_T_GET_ID);
    let data = data_segments(&bytes, data_bytes, device_writes).map_err(ioerr)?;
    let request = |kind, offset_bytes| BlkRequest {
        kind,
        offset_bytes,
        data: data.clone(),
        data_bytes,
        status,
    };
    let writes = matches!(
        kind,
        VIRTIO_BLK_T_OUT | VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES
    );
    if writes && limits.read_only {
        return Err(ioerr("the disk is read-only"));
    }
    match kind {
        VIRTIO_BLK_T_IN | VIRTIO_BLK_T_OUT => {
            let offset = read_write_offset(limits, sector, data_bytes).map_err(ioerr)?;
            let kind = if kind == VIRTIO_BLK_T_IN {
                Kind::Read
            } else {
                Kind::Write
            };
            Ok(request(kind, offset))
        }
        VIRTIO_BLK_T_FLUSH if data_bytes == 0 => Ok(request(Kind::Flush, 0)),
        VIRTIO_BLK_T_FLUSH => Err(ioerr("a flush with data")),
        VIRTIO_BLK_T_GET_ID => Ok(request(Kind::GetId, 0)),
        VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES => {
            let zeroes = kind == VIRTIO_BLK_T_WRITE_ZEROES;
            let ranges = read_ranges(mem, &bytes, header_end, data_bytes, limits, zeroes)
                .map_err(|(code, why)| refuse(code, why))?;
            Ok(request(
                if zeroes {
                    Kind::WriteZeroes(ranges)
                } else {
                    Kind::Discard(ranges)
                },
                0,
            ))
        }
        _ => Err(refuse(
            VIRTIO_BLK_S_UNSUPP,
            "a request type the disk does not offer",
        )),
    }
}

/// The request's type and sector from its header: the chain's first 16 bytes, which the
/// device must be allowed to read, with at least the status byte after them.
#[inline]
fn read_header<M: GuestMemoryBackend>(
    mem: &M,
    bytes: &Run<'_>,
) -> Result<(u32, u64), &'static str> {
    let header_end = HEADER_BYTES as u64;
    let mut header = [0u8; HEADER_BYTES];
    if bytes.total < header_end + 1 || !bytes.all(0, header_end, false) {
        return Err("no 16-byte header the device may read");
    }
    bytes
        .read(mem, 0, &mut header)
        .map_err(|_| "header unreadable")?;
    let kind = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    let sector = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    Ok((kind, sector))
}

/// The segments of the `data_bytes` between header and status byte, checked to be all in
/// the direction the request needs (`device_writes`: the device writes them).
#[inline]
fn data_segments(
    bytes: &Run<'_>,
    data_bytes: u64,
    device_writes: bool,
) -> Result<Vec<Segment>, &'static str> {
    let header_end = HEADER_BYTES as u64;
    let data_end = header_end + data_bytes;
    if !bytes.all(header_end, data_end, device_writes) {
        return Err(if device_writes {
            "data the device must write is read-only to it"
        } else {
            "data the device must read is marked for it to write"
        });
    }
    Ok(bytes.segments(header_end, data_end))
}

/// Where a read or write of `data_bytes` at `sector` starts on the disk, in bytes: its
/// sectors inside the disk and aligned to its block (`check_range`), with some data and no
/// more than a request may move.
#[inline]
fn read_write_offset(limits: &Limits, sector: u64, data_bytes: u64) -> Result<u64, &'static str> {
    let offset = check_range(limits, sector, data_bytes)?;
    if data_bytes == 0 {
        return Err("a read or write with no data");
    }
    if data_bytes > REQUEST_BYTES_MAX {
        return Err("more data than a request may move (32 MiB)");
    }
    Ok(offset)
}

/// Every descriptor inside the guest's memory and not empty, the last one writable: returns
/// the status byte's address.
fn check_descriptors<M: GuestMemoryBackend>(
    mem: &M,
    descriptors: &[Descriptor],
) -> Result<GuestAddress, Refused> {
    let refuse_silently = |why| Refused {
        status: None,
        code: VIRTIO_BLK_S_IOERR as u8,
        why,
    };
    // Every descriptor first: nothing is read from a chain that points outside the guest.
    if descriptors.len() > usize::from(QUEUE_SIZE_MAX) {
        return Err(refuse_silently("more descriptors than a request may have"));
    }
    for d in descriptors {
        if d.len == 0 {
            return Err(refuse_silently("a zero-length buffer"));
        }
        if !mem.check_range(GuestAddress(d.addr), d.len as usize) {
            return Err(refuse_silently("a buffer outside the guest's memory"));
        }
    }
    let Some(last) = descriptors.last().filter(|d| d.writable) else {
        return Err(refuse_silently("no status byte the device may write"));
    };
    Ok(GuestAddress(last.addr + u64::from(last.len) - 1))
}

/// A read or write of `bytes` from `sector`: inside the disk and aligned to its block.
/// Returns the byte offset.
fn check_range(limits: &Limits, sector: u64, bytes: u64) -> Result<u64, &'static str> {
    let block = u64::from(limits.block_bytes);
    let offset = sector
        .checked_mul(SECTOR_BYTES)
        .ok_or("a sector past any disk")?;
    if !offset.is_multiple_of(block) || !bytes.is_multiple_of(block) {
        return Err("not aligned to the disk's block");
    }
    if offset
        .checked_add(bytes)
        .is_none_or(|end| end > limits.capacity_bytes)
    {
        return Err("past the end of the disk");
    }
    Ok(offset)
}

/// The ranges of a discard or write-zeroes request, each checked.
fn read_ranges<M: GuestMemoryBackend>(
    mem: &M,
    bytes: &Run,
    from: u64,
    data_bytes: u64,
    limits: &Limits,
    zeroes: bool,
) -> Result<Vec<(u64, u64)>, (u32, &'static str)> {
    let ioerr = |why| (VIRTIO_BLK_S_IOERR, why);
    if data_bytes == 0 || !data_bytes.is_multiple_of(RANGE_BYTES) {
        return Err(ioerr("ranges not a whole number of 16-byte entries"));
    }
    let count = data_bytes / RANGE_BYTES;
    if count > u64::from(RANGES_MAX) {
        return Err(ioerr("more ranges than the disk takes in one request"));
    }
    let mut ranges = Vec::with_capacity(count as usize);
    for i in 0..count {
        let mut entry = [0u8; RANGE_BYTES as usize];
        bytes
            .read(mem, from + i * RANGE_BYTES, &mut entry)
            .map_err(|_| ioerr("range unreadable"))?;
        let sector = u64::from_le_bytes(entry[0..8].try_into().expect("8 bytes"));
        let sectors = u32::from_le_bytes(entry[8..12].try_into().expect("4 bytes"));
        let flags = u32::from_le_bytes(entry[12..16].try_into().expect("4 bytes"));
        let allowed = if zeroes {
            VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP
        } else {
            0
        };
        if flags & !allowed != 0 {
            return Err((VIRTIO_BLK_S_UNSUPP, "a range flag the disk does not offer"));
        }
        if sectors == 0 || sectors > RANGE_SECTORS_MAX {
            return Err(ioerr("a range of no sectors"));
        }
        let len = u64::from(sectors) * SECTOR_BYTES;
        let offset = check_range(limits, sector, len).map_err(ioerr)?;
        ranges.push((offset, len));
    }
    Ok(ranges)
}

/// A chain's descriptors seen as one run of bytes.
struct Run<'d> {
    descriptors: &'d [Descriptor],
    total: u64,
}

impl<'d> Run<'d> {
    fn of(descriptors: &'d [Descriptor]) -> Run<'d> {
        Run {
            descriptors,
            total: descriptors.iter().map(|d| u64::from(d.len)).sum(),
        }
    }

    /// The descriptors' parts that hold bytes `from..to` of the run, with where each part
    /// starts in the run.
    fn parts(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, &'d Descriptor, u64, u64)> {
        let mut at = 0u64;
        self.descriptors.iter().filter_map(move |d| {
            let (start, end) = (at, at + u64::from(d.len));
            at = end;
            let (lo, hi) = (start.max(from), end.min(to));
            // (run offset, descriptor, offset inside it, bytes)
            (lo < hi).then(|| (lo, d, lo - start, hi - lo))
        })
    }

    /// Whether every byte of `from..to` is in a descriptor the device may write (`writable`)
    /// or read (`!writable`).
    fn all(&self, from: u64, to: u64, writable: bool) -> bool {
        self.parts(from, to)
            .all(|(_, d, _, _)| d.writable == writable)
    }

    fn segments(&self, from: u64, to: u64) -> Vec<Segment> {
        self.parts(from, to)
            .map(|(_, d, inside, len)| Segment {
                addr: GuestAddress(d.addr + inside),
                len: len as u32,
            })
            .collect()
    }

    /// Reads bytes `from..from + out.len()` of the run.
    fn read<M: GuestMemoryBackend>(&self, mem: &M, from: u64, out: &mut [u8]) -> Result<(), ()> {
        let to = from + out.len() as u64;
        let mut copied = 0;
        for (run_at, d, inside, len) in self.parts(from, to) {
            let dst = &mut out[(run_at - from) as usize..][..len as usize];
            mem.read_slice(dst, GuestAddress(d.addr + inside))
                .map_err(|_| ())?;
            copied += len;
        }
        if copied == out.len() as u64 {
            Ok(())
        } else {
            Err(())
        }
    }
}

/// Copies `out.len()` bytes of a request's data from byte `at` of its segments (a write's
/// payload into the device's buffer).
pub fn gather<M: GuestMemoryBackend>(
    mem: &M,
    segments: &[Segment],
    at: u64,
    out: &mut [u8],
) -> Result<(), vm_memory::GuestMemoryError> {
    let mut done = 0usize;
    for (seg, inside, len) in pieces(segments, at, out.len() as u64) {
        mem.read_slice(&mut out[done..done + len], seg.addr.unchecked_add(inside))?;
        done += len;
    }
    // Callers ask only for bytes inside the request's data.
    debug_assert_eq!(done, out.len(), "gathered {done} of {} bytes", out.len());
    Ok(())
}

/// Copies `data` into a request's data from byte `at` of its segments (a read's result into
/// the guest).
pub fn scatter<M: GuestMemoryBackend>(
    mem: &M,
    segments: &[Segment],
    at: u64,
    data: &[u8],
) -> Result<(), vm_memory::GuestMemoryError> {
    let mut done = 0usize;
    for (seg, inside, len) in pieces(segments, at, data.len() as u64) {
        mem.write_slice(&data[done..done + len], seg.addr.unchecked_add(inside))?;
        done += len;
    }
    // Callers give only bytes that fit inside the request's data.
    debug_assert_eq!(done, data.len(), "scattered {done} of {} bytes", data.len());
    Ok(())
}

/// The parts of `segments` holding bytes `at..at + len` of the data: (segment, offset in
/// it, bytes).
fn pieces(segments: &[Segment], at: u64, len: u64) -> impl Iterator<Item = (&Segment, u64, usize)> {
    let mut start = 0u64;
    let end = at + len;
    segments.iter().filter_map(move |s| {
        let (lo, hi) = (start.max(at), (start + u64::from(s.len)).min(end));
        let inside = lo.saturating_sub(start);
        start += u64::from(s.len);
        (lo < hi).then(|| (s, inside, (hi - lo) as usize))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestMemoryMmap;

    const MEM: u64 = 1 << 20;

    fn memory() -> GuestMemoryMmap<()> {
        // Two regions with a hole between them.
        GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), MEM as usize),
            (GuestAddress(2 * MEM), MEM as usize),
        ])
        .unwrap()
    }

    fn limits() -> Limits {
        Limits {
            capacity_bytes: 1 << 30,
            block_bytes: 4096,
            read_only: false,
        }
    }

    fn header(mem: &GuestMemoryMmap<()>, at: u64, kind: u32, sector: u64) -> Descriptor {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[8..16].copy_from_slice(&sector.to_le_bytes());
        mem.write_slice(&h, GuestAddress(at)).unwrap();
        Descriptor {
            addr: at,
            len: 16,
            writable: false,
        }
    }

    fn d(addr: u64, len: u32, writable: bool) -> Descriptor {
        Descriptor {
            addr,
            len,
            writable,
        }
    }

    #[test]
    fn a_read_in_the_usual_three_descriptors() {
        let mem = memory();
        let chain = [
            header(&mem, 0, VIRTIO_BLK_T_IN, 16),
            d(4096, 8192, true),
            d(100, 1, true),
        ];
        let r = parse(&mem, &chain, &limits()).unwrap();
        assert_eq!(r.kind, Kind::Read);
        assert_eq!(r.offset_bytes, 16 * 512);
        assert_eq!(r.data_bytes, 8192);
        assert_eq!(r.status, GuestAddress(100));
    }

    #[test]
    fn a_header_sharing_its_descriptor_with_the_data() {
        let mem = memory();
        let mut h = header(&mem, 0, VIRTIO_BLK_T_OUT, 8);
        h.len = 16 + 4096;
        let r = parse(&mem, &[h, d(9000, 1, true)], &limits()).unwrap();
        assert_eq!(r.kind, Kind::Write);
        assert_eq!(
            r.data,
            vec![Segment {
                addr: GuestAddress(16),
                len: 4096
            }]
        );
    }

    #[test]
    fn bad_chains_fail_alone_and_say_why() {
        let mem = memory();
        let l = limits();
        // Each case's header at an address of its own (they are all written before any is
        // parsed).
        let at = std::cell::Cell::new(0x10000u64);
        let h = |kind, sector| {
            at.set(at.get() + 16);
            header(&mem, at.get(), kind, sector)
        };
        let cases: Vec<(Vec<Descriptor>, Option<u8>)> = vec![
            // Outside the guest: in the hole, past the end, wrapping round.
            (
                vec![
                    h(VIRTIO_BLK_T_IN, 0),
                    d(MEM + 4096, 4096, true),
                    d(100, 1, true),
                ],
                None,
            ),
            (
                vec![
                    h(VIRTIO_BLK_T_IN, 0),
                    d(3 * MEM - 10, 4096, true),
                    d(100, 1, true),
                ],
                None,
            ),
            (
                vec![
                    h(VIRTIO_BLK_T_IN, 0),
                    d(u64::MAX - 100, 4096, true),
                    d(100, 1, true),
                ],
                None,
            ),
            // Zero-length, no writable status.
            (
                vec![h(VIRTIO_BLK_T_IN, 0), d(4096, 0, true), d(100, 1, true)],
                None,
            ),
            (
                vec![h(VIRTIO_BLK_T_IN, 0), d(4096, 4096, true), d(100, 1, false)],
                None,
            ),
            // Wrong directions.
            (
                vec![h(VIRTIO_BLK_T_IN, 0), d(4096, 4096, false), d(100, 1, true)],
                Some(1),
            ),
            (
                vec![h(VIRTIO_BLK_T_OUT, 0), d(4096, 4096, true), d(100, 1, true)],
                Some(1),
            ),
            (
                vec![d(0, 16, true), d(4096, 4096, true), d(100, 1, true)],
                Some(1),
            ),
            // Past the end, misaligned, empty, a flush with data, an unknown type.
            (
                vec![
                    h(VIRTIO_BLK_T_IN, (1 << 21) - 1),
                    d(4096, 4096, true),
                    d(100, 1, true),
                ],
                Some(1),
            ),
            (
                vec![h(VIRTIO_BLK_T_IN, 1), d(4096, 4096, true), d(100, 1, true)],
                Some(1),
            ),
            (vec![h(VIRTIO_BLK_T_IN, 0), d(100, 1, true)], Some(1)),
            (
                vec![
                    h(VIRTIO_BLK_T_FLUSH, 0),
                    d(4096, 4096, false),
                    d(100, 1, true),
                ],
                Some(1),
            ),
            (vec![h(77, 0), d(100, 1, true)], Some(2)),
        ];
        for (i, (chain, code)) in cases.iter().enumerate() {
            let r = parse(&mem, chain, &l).expect_err(&format!("case {i} taken"));
            assert_eq!(r.status.map(|_| r.code), *code, "case {i}: {}", r.why);
        }
    }

    #[test]
    fn an_oversized_request_fails() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 40 << 20)]).unwrap();
        let chain = [
            header(&mem, 0, VIRTIO_BLK_T_IN, 0),
            d(4096, 33 << 20, true),
            d(100, 1, true),
        ];
        let r = parse(&mem, &chain, &limits()).unwrap_err();
        assert!(r.why.contains("32 MiB"), "{}", r.why);
    }

    #[test]
    fn a_read_only_disk_refuses_writes_discards_and_zeroes() {
        let mem = memory();
        let l = Limits {
            read_only: true,
            ..limits()
        };
        for kind in [
            VIRTIO_BLK_T_OUT,
            VIRTIO_BLK_T_DISCARD,
            VIRTIO_BLK_T_WRITE_ZEROES,
        ] {
            let chain = [
                header(&mem, 0, kind, 0),
                d(4096, 4096, false),
                d(100, 1, true),
            ];
            assert_eq!(
                parse(&mem, &chain, &l).unwrap_err().why,
                "the disk is read-only"
            );
        }
    }

    #[test]
    fn discard_ranges_are_read_and_checked() {
        let mem = memory();
        let mut entries = Vec::new();
        for (sector, sectors, flags) in [(8u64, 16u32, 0u32), (64, 8, 0)] {
            entries.extend_from_slice(&sector.to_le_bytes());
            entries.extend_from_slice(&sectors.to_le_bytes());
            entries.extend_from_slice(&flags.to_le_bytes());
        }
        mem.write_slice(&entries, GuestAddress(4096)).unwrap();
        let chain = [
            header(&mem, 0, VIRTIO_BLK_T_DISCARD, 0),
            d(4096, 32, false),
            d(100, 1, true),
        ];
        let r = parse(&mem, &chain, &limits()).unwrap();
        assert_eq!(r.kind, Kind::Discard(vec![(4096, 8192), (32768, 4096)]));
        // A flag a discard does not have; a misaligned range.
        mem.write_slice(&1u32.to_le_bytes(), GuestAddress(4096 + 12))
            .unwrap();
        assert_eq!(parse(&mem, &chain, &limits()).unwrap_err().code, 2);
        mem.write_slice(&0u32.to_le_bytes(), GuestAddress(4096 + 12))
            .unwrap();
        mem.write_slice(&9u64.to_le_bytes(), GuestAddress(4096))
            .unwrap();
        assert_eq!(parse(&mem, &chain, &limits()).unwrap_err().code, 1);
    }

    #[test]
    fn gather_and_scatter_follow_the_segments() {
        let mem = memory();
        let segments = [
            Segment {
                addr: GuestAddress(1000),
                len: 10,
            },
            Segment {
                addr: GuestAddress(2 * MEM),
                len: 10,
            },
        ];
        let data: Vec<u8> = (0..20).collect();
        scatter(&mem, &segments, 0, &data).unwrap();
        let mut back = [0u8; 8];
        gather(&mem, &segments, 6, &mut back).unwrap();
        assert_eq!(back, [6, 7, 8, 9, 10, 11, 12, 13]);
        let mut at_region_two = [0u8; 2];
        mem.read_slice(&mut at_region_two, GuestAddress(2 * MEM))
            .unwrap();
        assert_eq!(at_region_two, [10, 11]);
    }
}
