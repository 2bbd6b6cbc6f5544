//! `TestVmm`: a minimal vhost-user front end, the part of a VMM a back end talks to, without a
//! guest: it shares a memfd as guest memory, sets up split virtqueues in it, and plays the
//! guest's virtio-blk driver (descriptor chains, the available ring, kicks, the used ring).
//! Tests use it to know exactly which requests were answered and how, and to send chains no
//! real driver would; benches use it to measure a back end's cost per request without a
//! guest's emulation in the way. It talks to any vhost-user-blk back end (nvarray's, or
//! `qemu-storage-daemon`'s).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_T_DISCARD, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN,
    VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_WRITE_ZEROES,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::VIRTIO_RING_F_INDIRECT_DESC;
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
};
use vmm_sys_util::eventfd::EventFd;

use crate::request::Descriptor;
use crate::virtio_blk::{CONFIG_BYTES, ID_BYTES};

/// A vhost-user error as an I/O error, with its message.
fn vhost_err(e: vhost::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// Descriptors per virtqueue.
pub const QUEUE_SIZE: u16 = 256;
/// Requests in flight per queue at most (three descriptors each), leaving the table's last
/// descriptors for raw chains.
pub const DEPTH_MAX: usize = 64;
const RAW_FIRST: u16 = 3 * DEPTH_MAX as u16;

// Room for raw chains past the requests' descriptors; in each queue's area the descriptor
// table fits before the available ring (16 KiB on) and the used ring before the slots (64 KiB).
const _: () = assert!(RAW_FIRST < QUEUE_SIZE);
const _: () = assert!(16 * QUEUE_SIZE as u64 <= 16 * 1024);
const _: () = assert!(32 * 1024 + 4 + 8 * QUEUE_SIZE as u64 <= 64 * 1024);

const DESC_F_NEXT: u16 = 1;
const DESC_F_WRITE: u16 = 2;

/// Where one queue's structures and buffers lie in guest memory.
struct DriverQueue {
    base: u64,
    desc: u64,
    avail: u64,
    used: u64,
    /// Per slot: header (16 bytes), status (1), then `slot_bytes` of data.
    slots: u64,
    slot_bytes: u64,
    next_avail: u16,
    last_used: u16,
    kick: EventFd,
    call: EventFd,
    free_slots: Vec<usize>,
}

/// An answered request: its chain's head, the bytes the back end says it wrote, its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub head: u16,
    pub used_len: u32,
    pub status: u8,
}

/// The client's view of the disk, from the configuration space.
#[derive(Clone, Copy, Debug)]
pub struct DiskInfo {
    pub capacity_bytes: u64,
    pub block_bytes: u32,
    pub queues: u16,
    pub features: u64,
}

pub struct TestVmm {
    frontend: Frontend,
    mem: GuestMemoryMmap<()>,
    queues: Vec<DriverQueue>,
    pub disk: DiskInfo,
}

impl TestVmm {
    /// Connects to the back end at `socket`, shares `mem_bytes` of guest memory and sets up
    /// `queues` virtqueues whose requests carry up to `slot_bytes` of data each.
    pub fn connect(socket: &Path, queues: u16, slot_bytes: u64) -> io::Result<TestVmm> {
        let mut frontend = Frontend::connect(socket, u64::from(queues)).map_err(vhost_err)?;
        frontend.set_owner().map_err(vhost_err)?;
        let wanted = Self::negotiate(&mut frontend, queues)?;
        let disk = Self::disk_info(&mut frontend, wanted)?;

        let queue_bytes = 64 * 1024 + DEPTH_MAX as u64 * (64 + slot_bytes.next_multiple_of(4096));
        let mem_bytes = (u64::from(queues) * queue_bytes).next_multiple_of(2 << 20);
        let (mem, host_base) = Self::share_memory(&mut frontend, mem_bytes)?;

        let mut driver_queues = Vec::new();
        for q in 0..usize::from(queues) {
            let base = q as u64 * queue_bytes;
            let dq = Self::set_up_queue(&mut frontend, q, base, slot_bytes, host_base)?;
            driver_queues.push(dq);
        }
        Ok(TestVmm {
            frontend,
            mem,
            queues: driver_queues,
            disk,
        })
    }

    /// Agrees on the features (everything offered but event-idx) and protocol features
    /// (configuration space, multiple queues) and checks the back end offers `queues` queues.
    /// Returns the features set.
    fn negotiate(frontend: &mut Frontend, queues: u16) -> io::Result<u64> {
        let offered = frontend.get_features().map_err(vhost_err)?;
        // Everything but event-idx (this driver wants an interrupt per answer it waits for).
        let wanted = offered
            & ((1 << VIRTIO_F_VERSION_1)
                | (1 << VIRTIO_RING_F_INDIRECT_DESC)
                | (0xffff) // the device's own (virtio-blk) bits
                | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits());
        frontend.set_features(wanted).map_err(vhost_err)?;
        let protocol = frontend.get_protocol_features().map_err(vhost_err)?;
        frontend
            .set_protocol_features(
                protocol & (VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ),
            )
            .map_err(vhost_err)?;
        let offered_queues = frontend.get_queue_num().map_err(vhost_err)?;
        if u64::from(queues) > offered_queues {
            return Err(io::Error::other(format!(
                "the back end offers {offered_queues} queues, not {queues}"
            )));
        }
        Ok(wanted)
    }

    /// The disk as the configuration space describes it (`features`: those agreed on).
    fn disk_info(frontend: &mut Frontend, features: u64) -> io::Result<DiskInfo> {
        let (_, config) = frontend
            .get_config(
                0,
                CONFIG_BYTES as u32,
                VhostUserConfigFlags::WRITABLE,
                &[0u8; CONFIG_BYTES],
            )
            .map_err(vhost_err)?;
        let le32 = |at: usize| u32::from_le_bytes(config[at..at + 4].try_into().expect("4"));
        Ok(DiskInfo {
            capacity_bytes: u64::from_le_bytes(config[0..8].try_into().expect("8")) * 512,
            block_bytes: le32(20),
            queues: u16::from_le_bytes([config[34], config[35]]),
            features,
        })
    }

    /// Makes `mem_bytes` of guest memory (a memfd) and shares it with the back end; returns it
    /// and the address it is mapped at here.
    fn share_memory(
        frontend: &mut Frontend,
        mem_bytes: u64,
    ) -> io::Result<(GuestMemoryMmap<()>, u64)> {
        let file = memfd(mem_bytes)?;
        let mem = GuestMemoryMmap::<()>::from_ranges_with_files(&[(
            GuestAddress(0),
            mem_bytes as usize,
            Some(FileOffset::new(file, 0)),
        )])
        .map_err(|e| io::Error::other(e.to_string()))?;
        let region = mem.iter().next().expect("one region");
        let info = VhostUserMemoryRegionInfo::from_guest_region(region).map_err(vhost_err)?;
        let host_base = info.userspace_addr;
        frontend.set_mem_table(&[info]).map_err(vhost_err)?;
        Ok((mem, host_base))
    }

    /// Lays out virtqueue `q` in guest memory from `base` (descriptor table, available ring,
    /// used ring, then the slots of `slot_bytes` of data) and tells the back end where it is
    /// (guest memory mapped at `host_base` here), with its kick and call events.
    fn set_up_queue(
        frontend: &mut Frontend,
        q: usize,
        base: u64,
        slot_bytes: u64,
        host_base: u64,
    ) -> io::Result<DriverQueue> {
        let (desc, avail, used) = (base, base + 16 * 1024, base + 32 * 1024);
        let dq = DriverQueue {
            base,
            desc,
            avail,
            used,
            slots: base + 64 * 1024,
            slot_bytes: slot_bytes.next_multiple_of(4096),
            next_avail: 0,
            last_used: 0,
            kick: EventFd::new(libc::EFD_NONBLOCK)?,
            call: EventFd::new(libc::EFD_NONBLOCK)?,
            free_slots: (0..DEPTH_MAX).rev().collect(),
        };
        frontend.set_vring_num(q, QUEUE_SIZE).map_err(vhost_err)?;
        frontend
            .set_vring_addr(
                q,
                &VringConfigData {
                    queue_max_size: QUEUE_SIZE,
                    queue_size: QUEUE_SIZE,
                    flags: 0,
                    desc_table_addr: host_base + desc,
                    used_ring_addr: host_base + used,
                    avail_ring_addr: host_base + avail,
                    log_addr: None,
                },
            )
            .map_err(vhost_err)?;
        frontend.set_vring_base(q, 0).map_err(vhost_err)?;
        frontend.set_vring_call(q, &dq.call).map_err(vhost_err)?;
        frontend.set_vring_kick(q, &dq.kick).map_err(vhost_err)?;
        frontend.set_vring_enable(q, true).map_err(vhost_err)?;
        Ok(dq)
    }

    /// Guest memory, to put data in and read results out.
    pub fn memory(&self) -> &GuestMemoryMmap<()> {
        &self.mem
    }

    /// Where slot `slot` of queue `queue` keeps its data.
    pub fn data_addr(&self, queue: usize, slot: usize) -> GuestAddress {
        let q = &self.queues[queue];
        GuestAddress(q.slots + slot as u64 * (64 + q.slot_bytes) + 64)
    }

    /// A free slot of `queue`, if any.
    pub fn take_slot(&mut self, queue: usize) -> Option<usize> {
        self.queues[queue].free_slots.pop()
    }

    /// Makes a virtio-blk request of `kind` on `sector` with `data_bytes` of the slot's data
    /// available (not yet kicked). The chain's head is `3 * slot`.
    pub fn post(&mut self, queue: usize, slot: usize, kind: u32, sector: u64, data_bytes: u32) {
        let q = &self.queues[queue];
        // A slot's chain uses descriptors below the raw chains', and its data stays in it.
        debug_assert!(slot < DEPTH_MAX, "slot {slot}");
        debug_assert!(
            u64::from(data_bytes) <= q.slot_bytes,
            "{data_bytes} bytes in a slot of {}",
            q.slot_bytes
        );
        let slot_at = q.slots + slot as u64 * (64 + q.slot_bytes);
        let mut header = [0u8; 16];
        header[0..4].copy_from_slice(&kind.to_le_bytes());
        header[8..16].copy_from_slice(&sector.to_le_bytes());
        self.write(slot_at, &header);
        self.write(slot_at + 16, &[0xff]);
        let device_writes = matches!(kind, VIRTIO_BLK_T_IN | VIRTIO_BLK_T_GET_ID);
        let mut chain = vec![Descriptor {
            addr: slot_at,
            len: 16,
            writable: false,
        }];
        if data_bytes > 0 {
            chain.push(Descriptor {
                addr: slot_at + 64,
                len: data_bytes,
                writable: device_writes,
            });
        }
        chain.push(Descriptor {
            addr: slot_at + 16,
            len: 1,
            writable: true,
        });
        let first = 3 * slot as u16;
        self.put_chain(queue, first, &chain);
    }

    /// Makes any chain available (not yet kicked), in the descriptors kept for raw chains: one
    /// raw chain at a time. Returns its head.
    pub fn post_raw(&mut self, queue: usize, chain: &[Descriptor]) -> u16 {
        assert!(chain.len() <= usize::from(QUEUE_SIZE - RAW_FIRST));
        self.put_chain(queue, RAW_FIRST, chain);
        RAW_FIRST
    }

    /// Writes a raw descriptor table entry (for chains with loops or bad links) and makes
    /// `head` available.
    pub fn post_descriptor_table(
        &mut self,
        queue: usize,
        entries: &[(u64, u32, u16, u16)],
        head: u16,
    ) {
        let desc = self.queues[queue].desc;
        for (i, &(addr, len, flags, next)) in entries.iter().enumerate() {
            self.write_desc(desc, RAW_FIRST + i as u16, addr, len, flags, next);
        }
        self.make_available(queue, head);
    }

    fn put_chain(&mut self, queue: usize, first: u16, chain: &[Descriptor]) {
        let desc = self.queues[queue].desc;
        for (i, d) in chain.iter().enumerate() {
            let index = first + i as u16;
            let more = i + 1 < chain.len();
            let flags =
                if more { DESC_F_NEXT } else { 0 } | if d.writable { DESC_F_WRITE } else { 0 };
            self.write_desc(
                desc,
                index,
                d.addr,
                d.len,
                flags,
                if more { index + 1 } else { 0 },
            );
        }
        self.make_available(queue, first);
    }

    fn write_desc(&self, desc: u64, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut e = [0u8; 16];
        e[0..8].copy_from_slice(&addr.to_le_bytes());
        e[8..12].copy_from_slice(&len.to_le_bytes());
        e[12..14].copy_from_slice(&flags.to_le_bytes());
        e[14..16].copy_from_slice(&next.to_le_bytes());
        self.write(desc + 16 * u64::from(index), &e);
    }

    fn make_available(&mut self, queue: usize, head: u16) {
        let q = &mut self.queues[queue];
        let at = q.avail + 4 + 2 * u64::from(q.next_avail % QUEUE_SIZE);
        self.mem
            .write_obj(head.to_le(), GuestAddress(at))
            .expect("inside guest memory");
        q.next_avail = q.next_avail.wrapping_add(1);
        // The entry before the index (the driver's release).
        self.mem
            .store(
                q.next_avail.to_le(),
                GuestAddress(q.avail + 2),
                Ordering::Release,
            )
            .expect("inside guest memory");
    }

    /// Tells the back end that `queue` has new requests.
    pub fn kick(&self, queue: usize) -> io::Result<()> {
        self.queues[queue].kick.write(1)
    }

    /// The answers the back end has put on `queue`'s used ring since the last call, without
    /// waiting.
    pub fn answers(&mut self, queue: usize) -> Vec<Answer> {
        let used = self.queues[queue].used;
        let idx: u16 = self
            .mem
            .load(GuestAddress(used + 2), Ordering::Acquire)
            .expect("inside guest memory");
        let mut out = Vec::new();
        while self.queues[queue].last_used != u16::from_le(idx) {
            let q = &self.queues[queue];
            let at = used + 4 + 8 * u64::from(q.last_used % QUEUE_SIZE);
            let id: u32 = self.mem.read_obj(GuestAddress(at)).expect("inside");
            let len: u32 = self.mem.read_obj(GuestAddress(at + 4)).expect("inside");
            let head = u32::from_le(id) as u16;
            let status = self.status_of(queue, head);
            out.push(Answer {
                head,
                used_len: u32::from_le(len),
                status,
            });
            let q = &mut self.queues[queue];
            q.last_used = q.last_used.wrapping_add(1);
            if head < RAW_FIRST && head.is_multiple_of(3) {
                q.free_slots.push(usize::from(head / 3));
            }
        }
        out
    }

    /// The status byte of the chain at `head` (raw chains: whatever its last descriptor's
    /// last byte holds).
    fn status_of(&self, queue: usize, head: u16) -> u8 {
        let q = &self.queues[queue];
        if head < RAW_FIRST {
            let slot_at = q.slots + u64::from(head / 3) * (64 + q.slot_bytes);
            return self
                .mem
                .read_obj(GuestAddress(slot_at + 16))
                .unwrap_or(0xff);
        }
        0xff
    }

    /// Waits up to `timeout` for at least one answer on `queue` (on the call eventfd, after
    /// a short spin).
    pub fn wait_answers(&mut self, queue: usize, timeout: Duration) -> io::Result<Vec<Answer>> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.answers(queue);
            if !got.is_empty() {
                return Ok(got);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no answer from the back end",
                ));
            }
            let mut pfd = libc::pollfd {
                fd: self.queues[queue].call.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd, its count given.
            unsafe { libc::poll(&mut pfd, 1, left.as_millis().clamp(1, 100) as i32) };
            let _ = self.queues[queue].call.read();
        }
    }

    /// One request at a time, waited for: `kind` on `sector` with `data` (written into the
    /// slot first, for a write) of `data_bytes`. Returns its answer and, for a read or
    /// GET_ID, the slot's data.
    pub fn request(
        &mut self,
        queue: usize,
        kind: u32,
        sector: u64,
        data: Option<&[u8]>,
        data_bytes: u32,
    ) -> io::Result<(Answer, Vec<u8>)> {
        let slot = self
            .take_slot(queue)
            .ok_or_else(|| io::Error::other("every slot of the queue is in flight"))?;
        if let Some(d) = data {
            self.write(self.data_addr(queue, slot).0, d);
        }
        self.post(queue, slot, kind, sector, data_bytes);
        self.kick(queue)?;
        let answers = self.wait_answers(queue, Duration::from_secs(10))?;
        let answer = *answers
            .iter()
            .find(|a| a.head == 3 * slot as u16)
            .ok_or_else(|| io::Error::other(format!("unexpected answers {answers:?}")))?;
        let mut out = vec![0u8; data_bytes as usize];
        if matches!(kind, VIRTIO_BLK_T_IN | VIRTIO_BLK_T_GET_ID) {
            self.mem
                .read_slice(&mut out, self.data_addr(queue, slot))
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        Ok((answer, out))
    }

    pub fn read(&mut self, queue: usize, offset: u64, len: u32) -> io::Result<(u8, Vec<u8>)> {
        let (a, data) = self.request(queue, VIRTIO_BLK_T_IN, offset / 512, None, len)?;
        Ok((a.status, data))
    }

    pub fn write(&self, addr: u64, bytes: &[u8]) {
        self.mem
            .write_slice(bytes, GuestAddress(addr))
            .expect("inside guest memory");
    }

    pub fn write_at(&mut self, queue: usize, offset: u64, data: &[u8]) -> io::Result<u8> {
        let (a, _) = self.request(
            queue,
            VIRTIO_BLK_T_OUT,
            offset / 512,
            Some(data),
            data.len() as u32,
        )?;
        Ok(a.status)
    }

    pub fn flush(&mut self, queue: usize) -> io::Result<u8> {
        Ok(self
            .request(queue, VIRTIO_BLK_T_FLUSH, 0, None, 0)?
            .0
            .status)
    }

    /// Discard (`zeroes` false) or write-zeroes of the ranges (byte offset, bytes).
    pub fn ranges(&mut self, queue: usize, zeroes: bool, ranges: &[(u64, u64)]) -> io::Result<u8> {
        let mut entries = Vec::new();
        for &(offset, len) in ranges {
            entries.extend_from_slice(&(offset / 512).to_le_bytes());
            entries.extend_from_slice(&((len / 512) as u32).to_le_bytes());
            entries.extend_from_slice(&0u32.to_le_bytes());
        }
        let kind = if zeroes {
            VIRTIO_BLK_T_WRITE_ZEROES
        } else {
            VIRTIO_BLK_T_DISCARD
        };
        Ok(self
            .request(queue, kind, 0, Some(&entries), entries.len() as u32)?
            .0
            .status)
    }

    pub fn get_id(&mut self, queue: usize) -> io::Result<(u8, Vec<u8>)> {
        let (a, id) = self.request(queue, VIRTIO_BLK_T_GET_ID, 0, None, ID_BYTES as u32)?;
        Ok((a.status, id))
    }

    /// Stops every queue as a VMM does when its guest resets the device (`GET_VRING_BASE`):
    /// the back end must have answered everything it took. Returns each queue's next
    /// available index as the back end saw it.
    pub fn stop_queues(&mut self) -> io::Result<Vec<u32>> {
        (0..self.queues.len())
            .map(|q| {
                self.frontend
                    .get_vring_base(q)
                    .map_err(|e| io::Error::other(e.to_string()))
            })
            .collect()
    }

    /// Keeps `depth` requests of `block_bytes` in flight on `queue` for `duration`: random
    /// block-aligned offsets over the disk, reads (or writes when `write`), each answered one
    /// replaced at once, the driver waiting on the call eventfd as a guest waits for its
    /// interrupt. Returns the requests answered and how many failed.
    pub fn load(
        &mut self,
        queue: usize,
        depth: usize,
        block_bytes: u32,
        write: bool,
        duration: Duration,
    ) -> io::Result<(u64, u64)> {
        let blocks = self.disk.capacity_bytes / u64::from(block_bytes);
        let kind = if write {
            VIRTIO_BLK_T_OUT
        } else {
            VIRTIO_BLK_T_IN
        };
        // xorshift: the load's offsets, cheap enough to leave the CPU to the back end.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next_sector = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % blocks) * u64::from(block_bytes) / 512
        };
        for _ in 0..depth.min(DEPTH_MAX) {
            let slot = self.take_slot(queue).expect("a free slot");
            self.post(queue, slot, kind, next_sector(), block_bytes);
        }
        self.kick(queue)?;
        let (mut answered, mut failed) = (0u64, 0u64);
        let until = Instant::now() + duration;
        let mut in_flight = depth.min(DEPTH_MAX);
        while in_flight > 0 {
            let got = self.wait_answers(queue, Duration::from_secs(10))?;
            let more = Instant::now() < until;
            for a in &got {
                answered += 1;
                failed += u64::from(a.status != 0);
                if more {
                    let slot = self.take_slot(queue).expect("just freed");
                    self.post(queue, slot, kind, next_sector(), block_bytes);
                } else {
                    in_flight -= 1;
                }
            }
            if more {
                self.kick(queue)?;
            }
        }
        Ok((answered, failed))
    }

    /// Where queue `queue`'s area starts in guest memory (for tests pointing at it).
    pub fn queue_base(&self, queue: usize) -> u64 {
        self.queues[queue].base
    }

    /// Bytes of guest memory shared.
    pub fn memory_bytes(&self) -> u64 {
        self.mem.iter().map(|r| r.len()).sum()
    }
}

fn memfd(bytes: u64) -> io::Result<File> {
    // SAFETY: a NUL-terminated name and flags; returns a new descriptor or -1 (checked).
    let fd = unsafe { libc::memfd_create(c"nvarray-test-vmm".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor no one else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(bytes)?;
    Ok(file)
}
