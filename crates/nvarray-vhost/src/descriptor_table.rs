//! Any bytes as a guest's virtqueue: a descriptor table, an available ring and headers in a
//! small guest memory with a hole, whose chains are taken as the back end takes them
//! (`virtio-queue`'s iterator, `request::descriptors_of`) and judged by `request::parse`. What
//! is accepted must lie inside the guest and the disk; the data is then moved both ways as the
//! back end moves it (`gather`, `scatter`), through `vm-memory`. The fuzz target `vhost_chain`
//! and the test of 10^6 seeded tables (`tests/descriptor_tables.rs`) both run it: any panic, or
//! a broken invariant (an assertion here), is a bug.

use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::request::{self, Kind, Limits};

/// The guest: two 64 KiB regions with a 64 KiB hole between them.
const REGION_BYTES: u64 = 64 * 1024;
const SECOND_REGION: u64 = 2 * REGION_BYTES;
const QUEUE_SIZE: u16 = 16;
const DESC_TABLE: u64 = 0x1000;
const AVAIL_RING: u64 = 0x2000;
const USED_RING: u64 = 0x3000;
/// Where the tables' headers and data tend to point.
const HEADERS: u64 = 0x4000;

/// The disk chains are judged against.
pub const LIMITS: Limits = Limits {
    capacity_bytes: 1 << 20,
    block_bytes: 512,
    read_only: false,
};

/// What became of a table's chains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Judged {
    pub taken: usize,
    pub refused: usize,
}

/// Bytes of headers (and data) the table's bytes fill, from `HEADERS`.
pub const HEADER_AREA_BYTES: usize = 512;

/// Bytes of input a table takes: its descriptors, its available ring, its header area.
pub const TABLE_BYTES: usize =
    16 * QUEUE_SIZE as usize + 2 + 2 * QUEUE_SIZE as usize + HEADER_AREA_BYTES;

/// The guest memory tables are built in, kept from one table to the next (each table
/// rewrites every byte the queue reads).
pub struct Tables {
    mem: GuestMemoryMmap<()>,
}

impl Default for Tables {
    fn default() -> Self {
        Tables::new()
    }
}

impl Tables {
    pub fn new() -> Tables {
        Tables {
            mem: GuestMemoryMmap::<()>::from_ranges(&[
                (GuestAddress(0), REGION_BYTES as usize),
                (GuestAddress(SECOND_REGION), REGION_BYTES as usize),
            ])
            .expect("two small regions"),
        }
    }

    /// Builds the queue `bytes` describe and judges every chain it makes available.
    pub fn judge(&mut self, bytes: &[u8]) -> Judged {
        judge_in(&self.mem, bytes)
    }
}

/// Builds the queue `bytes` describe in a fresh guest and judges every chain it makes
/// available.
pub fn judge(bytes: &[u8]) -> Judged {
    Tables::new().judge(bytes)
}

fn judge_in(mem: &GuestMemoryMmap<()>, bytes: &[u8]) -> Judged {
    write_queue(mem, bytes);
    let mut queue = ready_queue();

    let mut judged = Judged::default();
    // An available index past the ring's size breaks the ring: the back end stops there.
    let Ok(chains) = queue.iter(mem) else {
        return judged;
    };
    let chains: Vec<_> = chains.take(usize::from(QUEUE_SIZE)).collect();
    for chain in chains {
        let descriptors = request::descriptors_of(chain);
        match request::parse(mem, &descriptors, &LIMITS) {
            Ok(r) => {
                judged.taken += 1;
                check_accepted(mem, &r);
            }
            Err(refused) => {
                judged.refused += 1;
                if let Some(at) = refused.status {
                    assert!(mem.check_range(at, 1), "a status byte outside the guest");
                    mem.write_obj(refused.code, at).expect("checked");
                }
            }
        }
    }
    judged
}

/// Writes the queue `bytes` describe into the guest (zeroes past their end): the descriptor
/// table, its addresses and lengths mostly near the guest's memory, the available ring and the
/// header area.
fn write_queue(mem: &GuestMemoryMmap<()>, bytes: &[u8]) {
    let mut input = bytes.iter().copied().chain(std::iter::repeat(0));
    let mut take = |n: usize| -> Vec<u8> { input.by_ref().take(n).collect() };
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));

    for i in 0..u64::from(QUEUE_SIZE) {
        let e = take(16);
        let raw = u64_of(&e[0..8]);
        // Mostly near the guest's memory (inside, in the hole, just past the end), sometimes
        // anywhere at all.
        let addr = if raw >> 63 == 0 {
            raw % (SECOND_REGION + 2 * REGION_BYTES)
        } else {
            raw
        };
        let len = u32::from_le_bytes(e[8..12].try_into().expect("4 bytes"));
        let len = if len >> 31 == 0 { len % 0x2_0000 } else { len };
        let mut entry = [0u8; 16];
        entry[0..8].copy_from_slice(&addr.to_le_bytes());
        entry[8..12].copy_from_slice(&len.to_le_bytes());
        entry[12..16].copy_from_slice(&e[12..16]); // flags, next: as given
        mem.write_slice(&entry, GuestAddress(DESC_TABLE + 16 * i))
            .expect("inside");
    }
    let ring = take(2 + 2 * usize::from(QUEUE_SIZE));
    let count = u16::from(ring[0]) % (QUEUE_SIZE + 1) + u16::from(ring[1] & 0x80) * 2;
    mem.write_slice(&ring[2..], GuestAddress(AVAIL_RING + 4))
        .expect("inside");
    mem.write_obj(count.to_le(), GuestAddress(AVAIL_RING + 2))
        .expect("inside");
    let headers = take(HEADER_AREA_BYTES);
    mem.write_slice(&headers, GuestAddress(HEADERS))
        .expect("inside");
}

/// The queue over the table's fixed addresses, ready to take chains from.
fn ready_queue() -> Queue {
    let mut queue = Queue::new(QUEUE_SIZE).expect("a valid size");
    queue.set_size(QUEUE_SIZE);
    queue
        .try_set_desc_table_address(GuestAddress(DESC_TABLE))
        .expect("aligned");
    queue
        .try_set_avail_ring_address(GuestAddress(AVAIL_RING))
        .expect("aligned");
    queue
        .try_set_used_ring_address(GuestAddress(USED_RING))
        .expect("aligned");
    queue.set_ready(true);
    queue
}

/// What `parse` accepted lies inside the guest and the disk; its data moves both ways.
fn check_accepted(mem: &GuestMemoryMmap<()>, r: &request::BlkRequest) {
    let mut total = 0u64;
    for s in &r.data {
        assert!(s.len > 0, "an empty segment");
        assert!(
            mem.check_range(s.addr, s.len as usize),
            "a segment outside the guest: {s:?}"
        );
        total += u64::from(s.len);
    }
    assert_eq!(total, r.data_bytes, "segments and data length disagree");
    assert!(
        mem.check_range(r.status, 1),
        "a status byte outside the guest"
    );
    match &r.kind {
        Kind::Read | Kind::Write => {
            assert!(r.offset_bytes + r.data_bytes <= LIMITS.capacity_bytes);
            assert!(r.data_bytes > 0 && r.data_bytes.is_multiple_of(512));
            let mut buffer = vec![0u8; r.data_bytes as usize];
            if r.kind == Kind::Write {
                request::gather(mem, &r.data, 0, &mut buffer).expect("checked segments");
            } else {
                request::scatter(mem, &r.data, 0, &buffer).expect("checked segments");
            }
        }
        Kind::Discard(ranges) | Kind::WriteZeroes(ranges) => {
            for &(offset, len) in ranges {
                assert!(offset + len <= LIMITS.capacity_bytes && len > 0);
            }
        }
        Kind::Flush => assert_eq!(r.data_bytes, 0),
        Kind::GetId => {}
    }
    mem.write_obj(0u8, r.status).expect("checked");
}
