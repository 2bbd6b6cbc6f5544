//! What the back end tells the guest about its disk: the virtio-blk feature bits it offers
//! and the configuration space (virtio 1.2, §5.2.4), built from the emulated device.

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_BLK_SIZE, VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ,
    VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_F_SIZE_MAX, VIRTIO_BLK_F_TOPOLOGY,
    VIRTIO_BLK_F_WRITE_ZEROES,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// virtio-blk counts in 512-byte sectors whatever the device's block size.
pub const SECTOR_BYTES: u64 = 512;

/// The descriptors a virtqueue may hold, and so the longest chain: QEMU's `queue-size` may be
/// anything up to this (1,024, virtio's largest split queue).
pub const QUEUE_SIZE_MAX: u16 = 1024;

/// Data segments a request may carry (`seg_max`): a chain's descriptors less the header's and
/// the status's, at QEMU's default queue size of 128 (the guest never puts more in a chain
/// than its queue holds).
pub const SEGMENTS_MAX: u32 = 126;

/// Largest data segment (`size_max`): the guest's block layer splits its requests so no
/// segment is larger.
pub const SEGMENT_BYTES_MAX: u32 = 256 * 1024;

/// Largest request the back end takes, in data bytes: what NBD allows (32 MiB), above the
/// 31.5 MiB that `seg_max` × `size_max` lets a guest build. Larger chains fail with IOERR.
pub const REQUEST_BYTES_MAX: u64 = 32 << 20;

// Whatever a guest builds within `seg_max` × `size_max` is taken, and such a chain (with its
// header and status) is no longer than the longest the back end takes.
const _: () = assert!(SEGMENTS_MAX as u64 * SEGMENT_BYTES_MAX as u64 <= REQUEST_BYTES_MAX);
const _: () = assert!(SEGMENTS_MAX + 2 <= QUEUE_SIZE_MAX as u32);

/// Ranges one discard or write-zeroes request may name (`max_discard_seg`,
/// `max_write_zeroes_seg`).
pub const RANGES_MAX: u32 = 32;

/// Sectors one discard or write-zeroes range may cover (`max_discard_sectors`,
/// `max_write_zeroes_sectors`): 1 GiB, so one request's commands stay few (the guest's block
/// layer splits larger ones).
pub const RANGE_SECTORS_MAX: u32 = 1 << 21;

/// Bytes of the ID a GET_ID request returns (`VIRTIO_BLK_ID_BYTES`).
pub const ID_BYTES: usize = 20;

/// Bytes of the configuration space the back end fills (up to `write_zeroes_may_unmap` and
/// its padding).
pub const CONFIG_BYTES: usize = 60;

/// The virtio-blk disk a guest sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskGeometry {
    pub capacity_bytes: u64,
    /// The device's block: the guest's logical block size, and the alignment of every request.
    pub block_bytes: u32,
    pub read_only: bool,
    /// Virtqueues offered (`num_queues`).
    pub queues: u16,
}

/// The feature bits offered: virtio 1, indirect descriptors and event-idx, the geometry's
/// fields, flush, multiple queues, and discard and write-zeroes unless read-only.
pub fn features(disk: &DiskGeometry) -> u64 {
    let bit = |b: u32| 1u64 << b;
    let mut f = bit(VIRTIO_F_VERSION_1)
        | bit(VIRTIO_RING_F_INDIRECT_DESC)
        | bit(VIRTIO_RING_F_EVENT_IDX)
        | bit(VIRTIO_BLK_F_SIZE_MAX)
        | bit(VIRTIO_BLK_F_SEG_MAX)
        | bit(VIRTIO_BLK_F_BLK_SIZE)
        | bit(VIRTIO_BLK_F_TOPOLOGY)
        | bit(VIRTIO_BLK_F_FLUSH)
        | bit(VIRTIO_BLK_F_MQ);
    if disk.read_only {
        f |= bit(VIRTIO_BLK_F_RO);
    } else {
        f |= bit(VIRTIO_BLK_F_DISCARD) | bit(VIRTIO_BLK_F_WRITE_ZEROES);
    }
    f
}

/// The configuration space, little-endian as virtio 1 lays it out.
pub fn config_space(disk: &DiskGeometry) -> [u8; CONFIG_BYTES] {
    let mut c = [0u8; CONFIG_BYTES];
    let mut put = |at: usize, bytes: &[u8]| c[at..at + bytes.len()].copy_from_slice(bytes);
    let block_sectors = (u64::from(disk.block_bytes) / SECTOR_BYTES).max(1) as u32;
    put(0, &(disk.capacity_bytes / SECTOR_BYTES).to_le_bytes()); // capacity
    put(8, &SEGMENT_BYTES_MAX.to_le_bytes()); // size_max
    put(12, &SEGMENTS_MAX.to_le_bytes()); // seg_max
                                          // 16..20: geometry (cylinders, heads, sectors): not offered.
    put(20, &disk.block_bytes.to_le_bytes()); // blk_size
                                              // 24: physical_block_exp, 25: alignment_offset, 26..28: min_io_size (in blocks).
    put(26, &1u16.to_le_bytes());
    // 28..32: opt_io_size: none preferred. 32: writeback, 33: unused.
    put(34, &disk.queues.to_le_bytes()); // num_queues
    put(36, &RANGE_SECTORS_MAX.to_le_bytes()); // max_discard_sectors
    put(40, &RANGES_MAX.to_le_bytes()); // max_discard_seg
    put(44, &block_sectors.to_le_bytes()); // discard_sector_alignment
    put(48, &RANGE_SECTORS_MAX.to_le_bytes()); // max_write_zeroes_sectors
    put(52, &RANGES_MAX.to_le_bytes()); // max_write_zeroes_seg
                                        // 56: write_zeroes_may_unmap = 0: zeroes are written, so they read back as zeroes.
    c
}

/// The part of the configuration space a guest asked for (`offset`, `size`), empty when it
/// lies outside.
pub fn config_window(disk: &DiskGeometry, offset: u32, size: u32) -> Vec<u8> {
    let space = config_space(disk);
    let start = offset as usize;
    match start.checked_add(size as usize) {
        Some(end) if end <= space.len() => space[start..end].to_vec(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(read_only: bool) -> DiskGeometry {
        DiskGeometry {
            capacity_bytes: 1 << 30,
            block_bytes: 4096,
            read_only,
            queues: 4,
        }
    }

    #[test]
    fn config_space_puts_each_field_at_its_offset() {
        let c = config_space(&disk(false));
        let u32_at = |at: usize| u32::from_le_bytes(c[at..at + 4].try_into().unwrap());
        assert_eq!(u64::from_le_bytes(c[0..8].try_into().unwrap()), 2 << 20);
        assert_eq!(u32_at(20), 4096);
        assert_eq!(u16::from_le_bytes([c[34], c[35]]), 4);
        assert_eq!(
            u32_at(44),
            8,
            "discards aligned to the device block, in sectors"
        );
        assert_eq!(u32_at(40), RANGES_MAX);
        assert!(
            u64::from(u32_at(8)) * u64::from(u32_at(12)) <= REQUEST_BYTES_MAX,
            "a request the guest may build within seg_max x size_max is taken"
        );
    }

    #[test]
    fn a_read_only_disk_offers_no_discard_or_write_zeroes() {
        let ro = features(&disk(true));
        let rw = features(&disk(false));
        assert_ne!(ro & (1 << VIRTIO_BLK_F_RO), 0);
        assert_eq!(ro & (1 << VIRTIO_BLK_F_DISCARD), 0);
        assert_ne!(rw & (1 << VIRTIO_BLK_F_WRITE_ZEROES), 0);
        assert_eq!(rw & (1 << VIRTIO_BLK_F_RO), 0);
    }

    #[test]
    fn a_window_outside_the_space_is_empty() {
        let d = disk(false);
        assert_eq!(config_window(&d, 0, 8).len(), 8);
        assert!(config_window(&d, 56, 8).is_empty());
        assert!(config_window(&d, u32::MAX, 2).is_empty());
    }
}
