//! The redo log: a ring of records on the NVM tier, one per committed transaction.
//!
//! A record is written whole, flushed and fenced in the bytes its committer reserved, and
//! published in log order (`append.rs`). Its 64-byte header carries its log position (`lsn`,
//! bytes since the pool was formatted), its length, a checksum of the header and one of the
//! body, so recovery walks the ring from the persistent head and stops at the first position
//! whose header does not name itself or whose body is torn: the end of the log. Nothing from
//! there on was acknowledged.
//!
//! Why not the seed's linked committed list (slide 19): reservations are made in log order, so
//! the ring's order already is the commit order and the header's self-check replaces the
//! 8-byte link; a commit costs one persist barrier instead of two (record, then link), and
//! removing digested records is one 8-byte store of the head instead of an unlink each.
//!
//! ```text
//! header  magic u32 | kind u32 | lsn u64 | len u64 | entries u32 | owner u32 |
//!         body_crc u32 | header_crc u32 | reserved [16] | state u64 (volatile, not checked)
//! entries (offset u64, len u32, reserved u32) × entries
//! data    the entries' bytes, concatenated; the record is padded to 64 bytes
//! ```

use crate::media::{Media, LINE};

pub const HEADER: usize = 64;
pub const ENTRY: usize = 16;
const MAGIC: u32 = 0x4e56_4c47; // "NVLG"
pub const KIND_TX: u32 = 1;
pub const KIND_PAD: u32 = 2;

// Offsets inside the header.
const R_LSN: usize = 8;
const R_LEN: usize = 16;
const R_ENTRIES: usize = 24;
const R_OWNER: usize = 28;
const R_BODY_CRC: usize = 32;
const R_HEADER_CRC: usize = 36;
/// Volatile progress of a record after it is durable: committed, then visible in the mapping.
pub const R_STATE: usize = 56;
pub const STATE_COMMITTED: u64 = 1;
pub const STATE_VISIBLE: u64 = 2;

// A padding record is a header alone, and reservations are whole lines: the smallest pad (one
// line) must hold the header. The state word must lie inside the header it follows.
const _: () = assert!(HEADER == LINE, "a one-line pad must hold a whole header");
const _: () = assert!(
    R_STATE + 8 <= HEADER,
    "the state word is part of the header"
);

/// A decoded, checked record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: u32,
    pub lsn: u64,
    pub len: u64,
    pub entries: u32,
    pub owner: u32,
    pub body_crc: u32,
}

/// Bytes a record with these writes occupies in the log.
pub fn record_len(entries: usize, data: usize) -> usize {
    (HEADER + entries * ENTRY + data).div_ceil(LINE) * LINE
}

/// Builds a record in `out` (header fields that depend on the log position are filled by
/// `seal`). `writes` yields (offset, bytes) in write order.
pub fn build<'a>(out: &mut Vec<u8>, writes: impl Iterator<Item = (u64, &'a [u8])> + Clone) {
    out.clear();
    out.resize(HEADER, 0);
    let mut n = 0u32;
    let mut data_bytes = 0usize;
    for (off, bytes) in writes.clone() {
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        n += 1;
        data_bytes += bytes.len();
    }
    for (_, bytes) in writes {
        out.extend_from_slice(bytes);
    }
    out.resize(out.len().div_ceil(LINE) * LINE, 0);
    // `TxCore::write` bounds a transaction by `record_len`; the log reserves what is built.
    debug_assert_eq!(
        out.len(),
        record_len(n as usize, data_bytes),
        "record size: expected record_len({n} entries, {data_bytes} data bytes), found {} bytes",
        out.len()
    );
    let body_crc = crc32c::crc32c(&out[HEADER..]);
    out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[4..8].copy_from_slice(&KIND_TX.to_le_bytes());
    let total = out.len() as u64;
    out[R_LEN..R_LEN + 8].copy_from_slice(&total.to_le_bytes());
    out[R_ENTRIES..R_ENTRIES + 4].copy_from_slice(&n.to_le_bytes());
    out[R_BODY_CRC..R_BODY_CRC + 4].copy_from_slice(&body_crc.to_le_bytes());
    out[R_STATE..R_STATE + 8].copy_from_slice(&STATE_COMMITTED.to_le_bytes());
}

/// Fills the position-dependent header fields of a built record (under the log lock).
pub fn seal(record: &mut [u8], lsn: u64, owner: u32) {
    // Recovery looks for leftover headers one line at a time (`recovery.rs`).
    debug_assert_eq!(
        lsn % LINE as u64,
        0,
        "record position: expected a multiple of {LINE}, found lsn {lsn}"
    );
    record[R_LSN..R_LSN + 8].copy_from_slice(&lsn.to_le_bytes());
    record[R_OWNER..R_OWNER + 4].copy_from_slice(&owner.to_le_bytes());
    let crc = crc32c::crc32c(&record[..R_HEADER_CRC]);
    record[R_HEADER_CRC..R_HEADER_CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The log position a sealed record names for itself.
pub fn sealed_lsn(record: &[u8]) -> u64 {
    u64::from_le_bytes(record[R_LSN..R_LSN + 8].try_into().expect("8"))
}

/// A padding record filling the ring from `lsn` to its end.
pub fn pad(lsn: u64, len: u64) -> [u8; HEADER] {
    // `Ring::header` refuses a shorter or ragged record, which would end the log here.
    debug_assert!(
        len >= HEADER as u64,
        "padding record too short: expected at least {HEADER} bytes, found {len} at lsn {lsn}"
    );
    debug_assert_eq!(
        len % LINE as u64,
        0,
        "padding record not whole lines: expected a multiple of {LINE}, found {len} at lsn {lsn}"
    );
    let mut h = [0u8; HEADER];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&KIND_PAD.to_le_bytes());
    h[R_LEN..R_LEN + 8].copy_from_slice(&len.to_le_bytes());
    h[R_BODY_CRC..R_BODY_CRC + 4].copy_from_slice(&crc32c::crc32c(&[]).to_le_bytes());
    seal(&mut h, lsn, u32::MAX);
    h
}

/// The ring of records inside the NVM media.
pub struct Ring<'a> {
    pub nvm: &'a Media,
    pub base: usize,
    pub size: u64,
}

impl Ring<'_> {
    pub fn pos(&self, lsn: u64) -> usize {
        (lsn % self.size) as usize
    }

    /// The header at `lsn` if it is intact and names `lsn` itself.
    pub fn header(&self, lsn: u64) -> Option<Header> {
        let mut h = [0u8; HEADER];
        self.nvm.read(self.base + self.pos(lsn), &mut h);
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
        if u32_at(0) != MAGIC || crc32c::crc32c(&h[..R_HEADER_CRC]) != u32_at(R_HEADER_CRC) {
            return None;
        }
        let header = Header {
            kind: u32_at(4),
            lsn: u64_at(R_LSN),
            len: u64_at(R_LEN),
            entries: u32_at(R_ENTRIES),
            owner: u32_at(R_OWNER),
            body_crc: u32_at(R_BODY_CRC),
        };
        let fits = header.len >= HEADER as u64
            && header.len.is_multiple_of(LINE as u64)
            && self.pos(lsn) as u64 + header.len <= self.size;
        let kind_ok = header.kind == KIND_TX || header.kind == KIND_PAD;
        let entries_ok = HEADER as u64 + header.entries as u64 * ENTRY as u64 <= header.len;
        (header.lsn == lsn && fits && kind_ok && entries_ok).then_some(header)
    }

    /// The record's body (entries and data) as stored.
    ///
    /// Records between the head and the tail are immutable until the head passes them, and
    /// only such records are read.
    pub fn body(&self, h: &Header) -> &[u8] {
        let start = self.base + self.pos(h.lsn) + HEADER;
        let len = h.len as usize - HEADER;
        debug_assert!(
            start + len <= self.nvm.len(),
            "record body outside the NVM tier: expected {start}+{len} <= {}, found it past",
            self.nvm.len()
        );
        // SAFETY: inside the log region (checked by `header`'s `fits`), and immutable while the
        // caller reads it (see above).
        unsafe { std::slice::from_raw_parts(self.nvm.base().add(start), len) }
    }

    /// Whether the body matches its checksum (a torn record does not).
    pub fn body_intact(&self, h: &Header) -> bool {
        crc32c::crc32c(self.body(h)) == h.body_crc
    }

    pub fn state_offset(&self, lsn: u64) -> usize {
        self.base + self.pos(lsn) + R_STATE
    }
}

/// The writes of a record: (pool offset, bytes). Entries whose extent does not fit the body or
/// the pool are reported as `Err` (the record is damaged).
pub fn entries<'b>(
    body: &'b [u8],
    h: &Header,
    pool_size_bytes: u64,
) -> Result<Vec<(u64, &'b [u8])>, String> {
    let n = h.entries as usize;
    let mut data_at = n * ENTRY;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let e = &body[i * ENTRY..(i + 1) * ENTRY];
        let off = u64::from_le_bytes(e[0..8].try_into().expect("8"));
        let len = u32::from_le_bytes(e[8..12].try_into().expect("4")) as usize;
        let end = data_at
            .checked_add(len)
            .filter(|&end| end <= body.len())
            .ok_or_else(|| format!("entry {i} runs past the record at lsn {}", h.lsn))?;
        if off
            .checked_add(len as u64)
            .is_none_or(|e| e > pool_size_bytes)
        {
            return Err(format!(
                "entry {i} of the record at lsn {} writes {len} bytes at {off}, outside the pool",
                h.lsn
            ));
        }
        out.push((off, &body[data_at..end]));
        data_at = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout_round_trips_and_detects_damage() {
        let a = [1u8; 10];
        let b = [2u8; 70];
        let writes = [(100u64, &a[..]), (5000u64, &b[..])];
        let mut rec = Vec::new();
        build(&mut rec, writes.iter().copied());
        assert_eq!(rec.len(), record_len(2, 80));
        seal(&mut rec, 4096 * 3, 7);
        let world = crate::sim::SimWorld::new(&vec![0u8; 8192], &[0u8; 1], None, 1);
        let world = std::sync::Arc::new(world);
        let nvm = Media::simulated(world, crate::sim::Tier::Nvm);
        let ring = Ring {
            nvm: &nvm,
            base: 0,
            size: 4096,
        };
        nvm.write(0, &rec);
        let h = ring.header(4096 * 3).expect("intact header");
        assert_eq!((h.owner, h.entries, h.len), (7, 2, rec.len() as u64));
        assert!(ring.body_intact(&h));
        let e = entries(ring.body(&h), &h, 10_000).unwrap();
        assert_eq!(e, vec![(100, &a[..]), (5000, &b[..])]);
        // Same position, another lap: not this record.
        assert!(ring.header(4096 * 2).is_none());
        // Outside the pool.
        assert!(entries(ring.body(&h), &h, 5000).is_err());
        // A flipped data byte breaks the body checksum, a flipped header byte the header.
        nvm.write(HEADER + 2 * ENTRY + 3, &[9]);
        assert!(!ring.body_intact(&h));
        nvm.write(R_LEN, &[0xff]);
        assert!(ring.header(4096 * 3).is_none());
    }
}
