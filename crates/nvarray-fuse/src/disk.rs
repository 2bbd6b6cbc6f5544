//! Byte-addressed I/O on the block-addressed device: what a FUSE read, write or fsync of the
//! file `disk` does, with statistics.
//!
//! FUSE requests come at any offset and length; the device takes whole blocks only. A read
//! fetches the blocks that cover the request into the scratch buffer and answers from there.
//! A write sends its whole blocks straight from the request and read-modify-writes the partial
//! blocks at either edge through the scratch buffer. The scratch buffer is allocated once, at
//! mount, and bounds the largest read (`IO_BYTES_MAX`, which the mount tells the kernel).
//! `DiskIo` is used by one thread at a time (the file system holds it in a mutex), so the
//! read-modify-write of an edge block can never interleave with another write of that block.

use std::sync::Arc;
use std::time::Instant;

use nvarray_host::{CompletionMode, Device, QueuePair};
use nvarray_report::{BusyClock, StreamStats};

use crate::error::IoError;

/// Largest read or write the kernel may send in one FUSE request (`max_read` and `max_write`
/// of the mount). 1 MiB is the kernel's own ceiling with the default 256 pages per request.
pub const IO_BYTES_MAX: u32 = 1 << 20;

/// What the front end has counted since the mount.
#[derive(Clone, Debug)]
pub struct DiskStats {
    /// Reads and writes as the FUSE client asked for them (bytes, latency from the request
    /// reaching us to its answer being ready, edge-block read-modify-write included).
    pub io: StreamStats,
    /// fsync requests, each a device flush.
    pub fsyncs: u64,
    /// Active time: reads, writes and fsyncs in progress, and the short gaps between them
    /// (`nvarray_report::BusyClock`), which the mount's rates are over.
    pub busy_ns: u64,
    /// Requests answered with an error, and the last such error.
    pub errors: u64,
    pub last_error: Option<String>,
}

/// The file `disk` over the device: the driver's queue pair and the scratch buffer.
pub struct DiskIo {
    device: Arc<Device>,
    qp: QueuePair,
    block_bytes: u64,
    /// The file's size: the device's, rounded down to whole blocks.
    size_bytes: u64,
    scratch: Box<[u8]>,
    stats: DiskStats,
    busy: BusyClock,
}

impl DiskIo {
    /// The file over `device`, with a queue pair of its own that waits for completions as
    /// `completion` says.
    pub fn new(device: Arc<Device>, completion: CompletionMode) -> Self {
        let block_bytes = u64::from(device.block_bytes());
        // The device's configuration is checked when it opens: a block is a power of two.
        assert!(
            block_bytes.is_power_of_two(),
            "block of {block_bytes} bytes"
        );
        let size_bytes = device.size_bytes() / block_bytes * block_bytes;
        // A read of IO_BYTES_MAX at an unaligned offset covers at most two more blocks.
        let scratch_bytes = IO_BYTES_MAX as usize + 2 * block_bytes as usize;
        let qp = device.queue_pair(completion);
        DiskIo {
            device,
            qp,
            block_bytes,
            size_bytes,
            scratch: vec![0u8; scratch_bytes].into_boxed_slice(),
            busy: BusyClock::new(),
            stats: DiskStats {
                io: StreamStats::new("fuse"),
                fsyncs: 0,
                busy_ns: 0,
                errors: 0,
                last_error: None,
            },
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    pub fn stats(&self) -> &DiskStats {
        &self.stats
    }

    /// Reads up to `len_bytes` at `offset_bytes`: fewer at the end of the file, none from
    /// the end on. The data is valid until the next call.
    pub fn read(&mut self, offset_bytes: u64, len_bytes: u32) -> Result<&[u8], IoError> {
        let t0 = Instant::now();
        if offset_bytes >= self.size_bytes || len_bytes == 0 {
            return Ok(&[]);
        }
        let len = u64::from(len_bytes).min(self.size_bytes - offset_bytes);
        if len > u64::from(IO_BYTES_MAX) {
            return Err(self.failed(IoError::TooLarge {
                len_bytes: len,
                max_bytes: u64::from(IO_BYTES_MAX),
            }));
        }
        let start = self.block_floor(offset_bytes);
        let end = self.block_ceil(offset_bytes + len);
        // The file is whole blocks, so the covering blocks never pass its end; and they fit
        // the scratch buffer (`new`).
        debug_assert!(
            end <= self.size_bytes,
            "blocks to {end} past the file's end"
        );
        let span = (end - start) as usize;
        debug_assert!(span <= self.scratch.len(), "{span} bytes of blocks to read");
        if let Err(e) = self
            .qp
            .read_at(&self.device, &mut self.scratch[..span], start)
        {
            return Err(self.failed(e.into()));
        }
        self.record(true, len as u32, t0);
        let at = (offset_bytes - start) as usize;
        Ok(&self.scratch[at..at + len as usize])
    }

    /// Writes `data` at `offset_bytes` and returns how many bytes were written: all of them,
    /// or as many as fit before the end of the file (a short write, as a block device
    /// gives). A write that starts at or after the end fails with `NoSpace`.
    pub fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Result<u32, IoError> {
        let t0 = Instant::now();
        if data.is_empty() {
            return Ok(0);
        }
        if offset_bytes >= self.size_bytes {
            return Err(self.failed(IoError::NoSpace {
                offset_bytes,
                size_bytes: self.size_bytes,
            }));
        }
        // A FUSE write is at most max_write (u32), so the length fits in 32 bits.
        let len = (data.len() as u64)
            .min(self.size_bytes - offset_bytes)
            .min(u64::from(u32::MAX));
        let data = &data[..len as usize];
        if let Err(e) = self.write_span(offset_bytes, data) {
            return Err(self.failed(e));
        }
        self.record(false, len as u32, t0);
        Ok(len as u32)
    }

    /// Makes every write acknowledged so far durable (a device flush: with a durable file
    /// backing, `msync` + `fdatasync`).
    pub fn fsync(&mut self) -> Result<(), IoError> {
        self.busy.begin();
        let flushed = self.qp.flush(&self.device);
        self.busy.end();
        self.stats.busy_ns = self.busy.busy_ns();
        match flushed {
            Ok(()) => {
                self.stats.fsyncs += 1;
                Ok(())
            }
            Err(e) => Err(self.failed(e.into())),
        }
    }

    /// Writes `data` (inside the file) at `offset_bytes`: partial blocks at either edge by
    /// read-modify-write through one block of the scratch buffer, the whole blocks between
    /// them straight from `data`.
    fn write_span(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
        let block = self.block_bytes;
        let end_bytes = offset_bytes + data.len() as u64;
        let head_start = self.block_floor(offset_bytes);
        let tail_start = self.block_floor(end_bytes - 1);
        if head_start == tail_start
            && (offset_bytes != head_start || end_bytes != head_start + block)
        {
            // Inside one block and not all of it.
            return self.patch_block(head_start, offset_bytes, data);
        }
        let mut at = offset_bytes;
        let mut rest = data;
        if offset_bytes != head_start {
            let n = (head_start + block - offset_bytes) as usize;
            self.patch_block(head_start, offset_bytes, &rest[..n])?;
            at += n as u64;
            rest = &rest[n..];
        }
        // `at` is block-aligned now; the whole blocks run up to the last block boundary.
        debug_assert_eq!(at % block, 0, "whole blocks from {at}");
        let whole = (self.block_floor(end_bytes) - at) as usize;
        if whole > 0 {
            self.qp.write_at(&self.device, &rest[..whole], at)?;
            at += whole as u64;
            rest = &rest[whole..];
        }
        // What is left is the tail: less than a block, ending at the write's end.
        debug_assert!((rest.len() as u64) < block, "{} bytes left", rest.len());
        debug_assert_eq!(at + rest.len() as u64, end_bytes, "bytes lost in the split");
        if !rest.is_empty() {
            self.patch_block(at, at, rest)?;
        }
        Ok(())
    }

    /// Read-modify-write of the block at `block_start`: `data` replaces its bytes from
    /// `offset_bytes` on.
    fn patch_block(
        &mut self,
        block_start: u64,
        offset_bytes: u64,
        data: &[u8],
    ) -> Result<(), IoError> {
        let block = self.block_bytes as usize;
        let at = (offset_bytes - block_start) as usize;
        assert!(at + data.len() <= block, "patch stays inside its block");
        let buf = &mut self.scratch[..block];
        self.qp.read_at(&self.device, buf, block_start)?;
        buf[at..at + data.len()].copy_from_slice(data);
        self.qp.write_at(&self.device, buf, block_start)?;
        Ok(())
    }

    fn block_floor(&self, bytes: u64) -> u64 {
        bytes / self.block_bytes * self.block_bytes
    }

    fn block_ceil(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.block_bytes) * self.block_bytes
    }

    /// Counts a request answered now that began at `t0`.
    fn record(&mut self, is_read: bool, len_bytes: u32, t0: Instant) {
        let latency_ns = t0.elapsed().as_nanos() as u64;
        // Serial requests: the clock's begin is this request's start, its end now.
        self.busy.begin_at(t0);
        self.busy.end();
        self.stats.busy_ns = self.busy.busy_ns();
        self.stats.io.record_host(is_read, len_bytes, latency_ns);
    }

    fn failed(&mut self, e: IoError) -> IoError {
        self.stats.errors += 1;
        self.stats.last_error = Some(e.to_string());
        e
    }
}
