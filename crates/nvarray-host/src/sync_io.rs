//! Synchronous I/O on one queue pair: `read_at`, `write_at` and `flush`, for callers that
//! want a byte range moved rather than commands managed (the front ends).

use crate::device::Device;
use crate::queue_pair::QueuePair;
use crate::{HostError, Opcode};

/// Synchronous I/O on one queue pair.
impl QueuePair {
    /// Reads `buf.len()` bytes at `offset_bytes`, split into commands of at most the device's
    /// largest command, as many in flight at once as tags allow.
    pub fn read_at(
        &mut self,
        device: &Device,
        buf: &mut [u8],
        offset_bytes: u64,
    ) -> Result<(), HostError> {
        self.transfer(device, offset_bytes, Buf::Read(buf))
    }

    /// Writes `buf` at `offset_bytes` (acknowledged when this returns).
    pub fn write_at(
        &mut self,
        device: &Device,
        buf: &[u8],
        offset_bytes: u64,
    ) -> Result<(), HostError> {
        self.transfer(device, offset_bytes, Buf::Write(buf))
    }

    /// Makes every acknowledged write durable (with a durable file backing).
    pub fn flush(&mut self, device: &Device) -> Result<(), HostError> {
        let p = device.prepare(Opcode::Flush, 0, 0, None)?;
        self.issue(p);
        let mut result = Ok(());
        while self.in_flight() > 0 {
            self.finish_some(device, 0, &mut Buf::Write(&[]), &mut result);
        }
        result
    }

    fn transfer(
        &mut self,
        device: &Device,
        offset_bytes: u64,
        mut buf: Buf<'_>,
    ) -> Result<(), HostError> {
        let (op, len) = match &buf {
            Buf::Read(b) => (Opcode::Read, b.len()),
            Buf::Write(b) => (Opcode::Write, b.len()),
        };
        // The whole request is checked first, so a bad one touches nothing. Longer than one
        // command is fine: it is split below.
        let first = len.min(device.command_bytes_max() as usize);
        device.check(op, offset_bytes, first as u64)?;
        device.check(op, offset_bytes + (len - first) as u64, first as u64)?;
        let step = device.command_bytes_max() as usize;
        let mut result = Ok(());
        let mut at = 0;
        while at < len && result.is_ok() {
            let n = step.min(len - at);
            let data = match &buf {
                Buf::Write(b) => Some(&b[at..at + n]),
                Buf::Read(_) => None,
            };
            match device.prepare(op, offset_bytes + at as u64, n as u32, data) {
                Ok(p) => {
                    self.issue(p);
                    at += n;
                }
                // Out of tags: let some commands finish first.
                Err(HostError::NoTag { .. }) if self.in_flight() > 0 => {
                    self.finish_some(device, offset_bytes, &mut buf, &mut result);
                }
                Err(e) => result = Err(e),
            }
        }
        while self.in_flight() > 0 {
            self.finish_some(device, offset_bytes, &mut buf, &mut result);
        }
        debug_assert!(
            result.is_err() || at == len,
            "moved {at} of {len} bytes without an error"
        );
        result
    }

    /// Waits for completions and finishes them, copying reads into `buf` (which starts at
    /// device offset `base`); keeps the first error.
    fn finish_some(
        &mut self,
        device: &Device,
        base: u64,
        buf: &mut Buf<'_>,
        result: &mut Result<(), HostError>,
    ) {
        self.wait(|done| {
            let out = match buf {
                Buf::Read(b) => {
                    let at = (done.offset_bytes - base) as usize;
                    Some(&mut b[at..at + done.len_bytes as usize])
                }
                Buf::Write(_) => None,
            };
            if let Err(e) = device.finish(done, out) {
                if result.is_ok() {
                    *result = Err(e);
                }
            }
        });
    }
}

enum Buf<'b> {
    Read(&'b mut [u8]),
    Write(&'b [u8]),
}
