//! Self-checking data for `verify`: what a write puts in each device block, and the check
//! every read makes. `crc32c`'s layout is below; the other kinds (`crc64`, `md5`, `sha256`,
//! `meta`, `pattern`) are on [`Verifier`].
//!
//! The idea is fio's verify header; the layout is nvarray's own. Each block written holds
//!
//! ```text
//! 0      4        8             16           24
//! | magic | crc32c | offset (LE)  | stamp (LE) | filler ...
//! ```
//!
//! `offset` is the block's own byte offset on the device, `stamp` identifies the write (the
//! writing thread and its write count), the filler is a pseudo-random function of both, and
//! the CRC-32C covers everything from byte 8 to the end of the block. A block read back must
//! be all zeroes (never written: devices start zeroed) or pass every check: a misdirected
//! write fails the offset, a torn or corrupted block the CRC. Blocks describe themselves, so
//! the check needs no table of what was written and stays valid with any number of threads
//! and overlapping commands in flight.

use nvarray_workload::Verify;

/// Tags a block written by `fill` ("nvv1").
pub const MAGIC: u32 = u32::from_le_bytes(*b"nvv1");
/// Bytes of the header at the start of each block.
pub const HEADER_BYTES: usize = 24;

/// Fills `buf` (whole blocks of `block_bytes`, the first at device offset `offset_bytes`) with
/// self-checking data for write `stamp`.
pub fn fill(buf: &mut [u8], offset_bytes: u64, block_bytes: usize, stamp: u64) {
    debug_assert!(block_bytes >= HEADER_BYTES && buf.len().is_multiple_of(block_bytes));
    for (i, block) in buf.chunks_exact_mut(block_bytes).enumerate() {
        let offset = offset_bytes + (i * block_bytes) as u64;
        block[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        block[8..16].copy_from_slice(&offset.to_le_bytes());
        block[16..24].copy_from_slice(&stamp.to_le_bytes());
        let mut state = offset ^ stamp.rotate_left(32);
        for word in block[HEADER_BYTES..].chunks_mut(8) {
            let bytes = splitmix64(&mut state).to_le_bytes();
            word.copy_from_slice(&bytes[..word.len()]);
        }
        let crc = crc32c::crc32c(&block[8..]);
        block[4..8].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Checks every block of `buf` (read from device offset `offset_bytes`); returns the number of
/// blocks that held written data, or what is wrong with the first bad block.
pub fn check(buf: &[u8], offset_bytes: u64, block_bytes: usize) -> Result<u64, String> {
    // `chunks_exact` would leave a partial block unchecked.
    debug_assert!(buf.len().is_multiple_of(block_bytes), "a partial block");
    let mut written = 0;
    for (i, block) in buf.chunks_exact(block_bytes).enumerate() {
        let offset = offset_bytes + (i * block_bytes) as u64;
        let word = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().expect("8 bytes"));
        let magic = u32::from_le_bytes(block[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            if block.iter().all(|&b| b == 0) {
                continue;
            }
            return Err(format!(
                "block at byte offset {offset} is neither zeroes nor written by this run \
                 (magic {magic:#010x}, expected {MAGIC:#010x})"
            ));
        }
        if word(8) != offset {
            return Err(format!(
                "block at byte offset {offset} holds the data written for offset {} \
                 (a misdirected write or read)",
                word(8)
            ));
        }
        let stored = u32::from_le_bytes(block[4..8].try_into().expect("4 bytes"));
        let crc = crc32c::crc32c(&block[8..]);
        if crc != stored {
            return Err(format!(
                "block at byte offset {offset}: CRC-32C {crc:#010x} does not match the stored \
                 {stored:#010x} (torn or corrupted data, write stamp {:#x})",
                word(16)
            ));
        }
        written += 1;
    }
    Ok(written)
}

/// The SplitMix64 step (Steele, Lea and Flood, 2014): cheap, and every bit depends on the seed.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How a thread's writes are made self-checking and its reads checked, for every `verify`
/// kind (`Verify`). `crc32c` keeps the layout above; the others:
///
/// ```text
/// crc64, md5, sha256, meta:  | magic | CRC-32C of 8..24+D | offset | stamp | digest (D) | data
/// pattern:                   | the pattern, repeated from the block's first byte           |
/// ```
///
/// The header's own CRC-32C covers the offset, the stamp and the digest; the digest (8, 16 or
/// 32 bytes, none for `meta`) covers the data after it. `meta`'s data is the filler, unchecked,
/// or with a `verify_pattern` the pattern, checked. `pattern` has no header, so it cannot tell a
/// misdirected block from a right one (as in fio).
#[derive(Clone, Debug)]
pub struct Verifier {
    kind: Verify,
    pattern: Option<Box<[u8]>>,
    /// Bytes each header covers (`verify_interval`; `None`: one device block).
    interval: Option<usize>,
    /// Whether reads are checked (`do_verify`).
    checks_reads: bool,
}

impl Verifier {
    /// The verifier of `kind` (`None` for `Verify::None`) with `pattern` (`verify_pattern`).
    pub fn new(kind: Verify, pattern: Option<&[u8]>) -> Option<Verifier> {
        (kind != Verify::None).then(|| Verifier {
            kind,
            pattern: pattern.map(Box::from),
            interval: None,
            checks_reads: true,
        })
    }

    /// The verifier of `job`'s `verify`, `verify_pattern`, `verify_interval` and `do_verify`.
    pub fn of_job(job: &nvarray_workload::JobSpec) -> Option<Verifier> {
        let mut v = Verifier::new(job.verify, job.verify_pattern.as_deref())?;
        v.interval = job
            .verify_interval_bytes
            .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
        v.checks_reads = job.do_verify;
        Some(v)
    }

    /// Bytes each header covers on a device of `block_bytes` blocks.
    pub fn interval_bytes(&self, block_bytes: usize) -> usize {
        self.interval.unwrap_or(block_bytes)
    }

    /// Whether the job's reads are checked (`do_verify`, on by default).
    pub fn checks_reads(&self) -> bool {
        self.checks_reads
    }

    /// Bytes of each block's header (0 for `pattern`): a block must hold at least this.
    pub fn header_bytes(&self) -> usize {
        match self.kind {
            Verify::Crc32c => HEADER_BYTES,
            Verify::Pattern => 0,
            kind => HEADER_BYTES + digest_len(kind),
        }
    }

    /// Fills `buf` (whole blocks of `block_bytes`, the first at device offset `offset_bytes`)
    /// for write `stamp`.
    pub fn fill(&self, buf: &mut [u8], offset_bytes: u64, block_bytes: usize, stamp: u64) {
        if self.kind == Verify::Crc32c {
            return fill(buf, offset_bytes, block_bytes, stamp);
        }
        // `emu::check_verify_fits` refused an interval without room for the header.
        debug_assert!(block_bytes >= self.header_bytes(), "no room for the header");
        debug_assert!(buf.len().is_multiple_of(block_bytes), "a partial block");
        for (i, block) in buf.chunks_exact_mut(block_bytes).enumerate() {
            let offset = offset_bytes + (i * block_bytes) as u64;
            let head = self.header_bytes();
            match &self.pattern {
                Some(p) if matches!(self.kind, Verify::Meta | Verify::Pattern) => {
                    repeat_into(&mut block[head..], p, head)
                }
                _ => {
                    let mut state = offset ^ stamp.rotate_left(32);
                    for word in block[head..].chunks_mut(8) {
                        let bytes = splitmix64(&mut state).to_le_bytes();
                        word.copy_from_slice(&bytes[..word.len()]);
                    }
                }
            }
            if self.kind == Verify::Pattern {
                continue;
            }
            block[0..4].copy_from_slice(&magic(self.kind).to_le_bytes());
            block[8..16].copy_from_slice(&offset.to_le_bytes());
            block[16..24].copy_from_slice(&stamp.to_le_bytes());
            let digest = digest(self.kind, &block[head..]);
            block[HEADER_BYTES..head].copy_from_slice(&digest[..head - HEADER_BYTES]);
            let crc = crc32c::crc32c(&block[8..head]);
            block[4..8].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Checks every block of `buf` (read from device offset `offset_bytes`); returns the
    /// number of blocks that held written data, or what is wrong with the first bad block.
    pub fn check(&self, buf: &[u8], offset_bytes: u64, block_bytes: usize) -> Result<u64, String> {
        if self.kind == Verify::Crc32c {
            return check(buf, offset_bytes, block_bytes);
        }
        debug_assert!(buf.len().is_multiple_of(block_bytes), "a partial block");
        let mut written = 0;
        for (i, block) in buf.chunks_exact(block_bytes).enumerate() {
            let offset = offset_bytes + (i * block_bytes) as u64;
            if block.iter().all(|&b| b == 0) {
                continue;
            }
            self.check_block(block, offset)?;
            written += 1;
        }
        Ok(written)
    }

    fn check_block(&self, block: &[u8], offset: u64) -> Result<(), String> {
        let head = self.header_bytes();
        let pattern_ok = |p: &[u8]| {
            block[head..]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == p[(head + i) % p.len()])
        };
        if self.kind == Verify::Pattern {
            let p = self.pattern.as_deref().unwrap_or(&[0]);
            return if pattern_ok(p) {
                Ok(())
            } else {
                Err(format!(
                    "block at byte offset {offset} is neither zeroes nor the verify_pattern"
                ))
            };
        }
        let word = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().expect("8 bytes"));
        let found = u32::from_le_bytes(block[0..4].try_into().expect("4 bytes"));
        if found != magic(self.kind) {
            return Err(format!(
                "block at byte offset {offset} is neither zeroes nor written by this run \
                 (magic {found:#010x}, expected {:#010x} for verify={})",
                magic(self.kind),
                self.kind
            ));
        }
        let stored = u32::from_le_bytes(block[4..8].try_into().expect("4 bytes"));
        if crc32c::crc32c(&block[8..head]) != stored {
            return Err(format!(
                "block at byte offset {offset}: its header's CRC-32C does not match (a torn or \
                 corrupted header)"
            ));
        }
        if word(8) != offset {
            return Err(format!(
                "block at byte offset {offset} holds the data written for offset {} (a \
                 misdirected write or read)",
                word(8)
            ));
        }
        match (&self.pattern, self.kind) {
            (Some(p), Verify::Meta) if !pattern_ok(p) => Err(format!(
                "block at byte offset {offset}: the data after the header is not the \
                 verify_pattern (write stamp {:#x})",
                word(16)
            )),
            (_, Verify::Meta) => Ok(()),
            (_, kind)
                if digest(kind, &block[head..])[..head - HEADER_BYTES]
                    != block[HEADER_BYTES..head] =>
            {
                Err(format!(
                    "block at byte offset {offset}: the {kind} of its data does not match the \
                     stored one (torn or corrupted data, write stamp {:#x})",
                    word(16)
                ))
            }
            _ => Ok(()),
        }
    }
}

/// `pattern` repeated into `out`, as if from the block's first byte (`out` starts `skip`
/// bytes in).
fn repeat_into(out: &mut [u8], pattern: &[u8], skip: usize) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = pattern[(skip + i) % pattern.len()];
    }
}

/// Each kind's magic, so a block written under one kind fails another's check by name.
fn magic(kind: Verify) -> u32 {
    u32::from_le_bytes(*match kind {
        Verify::Crc64 => b"nvc6",
        Verify::Md5 => b"nvm5",
        Verify::Sha256 => b"nvs2",
        Verify::Meta => b"nvmt",
        _ => b"nvv1",
    })
}

fn digest_len(kind: Verify) -> usize {
    match kind {
        Verify::Crc64 => 8,
        Verify::Md5 => 16,
        Verify::Sha256 => 32,
        _ => 0,
    }
}

/// The digest of `data` under `kind` (32 bytes, the first `digest_len` used).
fn digest(kind: Verify, data: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut out = [0u8; 32];
    match kind {
        Verify::Crc64 => out[..8].copy_from_slice(&crc64_jones(data).to_le_bytes()),
        Verify::Md5 => out[..16].copy_from_slice(&md5::Md5::digest(data)),
        Verify::Sha256 => out.copy_from_slice(&sha2::Sha256::digest(data)),
        _ => {}
    }
    out
}

/// CRC-64 with fio's parameters: the reflected polynomial of Jones (0x95AC9329AC4BC9B5), init
/// 0, no final xor (the catalogue's CRC-64/REDIS). Written out: a 256-entry table, built once.
fn crc64_jones(data: &[u8]) -> u64 {
    static TABLE: std::sync::OnceLock<[u64; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u64; 256];
        for (i, entry) in t.iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0x95ac_9329_ac4b_c9b5
                } else {
                    c >> 1
                };
            }
            *entry = c;
        }
        t
    });
    data.iter().fold(0u64, |crc, &b| {
        table[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: usize = 512;

    #[test]
    fn written_blocks_pass_and_zero_blocks_count_as_unwritten() {
        let mut buf = vec![0u8; 4 * B];
        fill(&mut buf[B..3 * B], 8 * B as u64, B, 7);
        // Blocks 0 and 3 stay zero; blocks 1 and 2 were written for offsets 8B and 9B.
        assert_eq!(check(&buf[B..3 * B], 8 * B as u64, B), Ok(2));
        assert_eq!(check(&buf[..B], 0, B), Ok(0));
    }

    #[test]
    fn every_kind_of_damage_is_caught() {
        let mut buf = vec![0u8; 2 * B];
        fill(&mut buf, 4096, B, 1);
        // A flipped bit anywhere after the magic.
        for at in [4, 8, 20, 24, 300, 2 * B - 1] {
            let mut bad = buf.clone();
            bad[at] ^= 0x10;
            assert!(
                check(&bad, 4096, B).is_err(),
                "flip at byte {at} not caught"
            );
        }
        // The right data read from (or written to) the wrong place.
        let err = check(&buf, 4096 + B as u64, B).unwrap_err();
        assert!(err.contains("misdirected"), "{err}");
        // Garbage that is not zero.
        let err = check(&[0xffu8; B], 0, B).unwrap_err();
        assert!(err.contains("neither zeroes"), "{err}");
        // Half of a newer write over an older one: a torn block.
        let mut newer = vec![0u8; 2 * B];
        fill(&mut newer, 4096, B, 2);
        let mut torn = buf.clone();
        torn[B / 2..B].copy_from_slice(&newer[B / 2..B]);
        let err = check(&torn, 4096, B).unwrap_err();
        assert!(err.contains("CRC-32C"), "{err}");
    }

    #[test]
    fn stamps_change_the_data() {
        let (mut a, mut b) = (vec![0u8; B], vec![0u8; B]);
        fill(&mut a, 0, B, 1);
        fill(&mut b, 0, B, 2);
        assert_ne!(a[HEADER_BYTES..], b[HEADER_BYTES..]);
    }

    #[test]
    fn crc64_is_fios() {
        // CRC-64/REDIS's check value.
        assert_eq!(crc64_jones(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn every_kind_catches_damage_and_misdirection_and_passes_zeroes() {
        let pattern: &[u8] = &[0xaa, 0x55, 0x5a, 0xa5];
        for (kind, p) in [
            (Verify::Crc64, None),
            (Verify::Md5, None),
            (Verify::Sha256, None),
            (Verify::Meta, None),
            (Verify::Meta, Some(pattern)),
            (Verify::Pattern, Some(pattern)),
        ] {
            let v = Verifier::new(kind, p).unwrap();
            let mut buf = vec![0u8; 3 * B];
            v.fill(&mut buf[..2 * B], 4096, B, 9);
            assert_eq!(v.check(&buf, 4096, B), Ok(2), "{kind}");
            // A flipped bit in the data: every kind with a digest or a pattern sees it.
            let mut bad = buf.clone();
            bad[B + 300] ^= 0x10;
            let caught = v.check(&bad, 4096, B).is_err();
            assert_eq!(
                caught,
                !(kind == Verify::Meta && p.is_none()),
                "{kind} {p:?}"
            );
            // A flipped bit in the header.
            if kind != Verify::Pattern {
                let mut bad = buf.clone();
                bad[10] ^= 1;
                assert!(v.check(&bad, 4096, B).is_err(), "{kind}: header");
                // The right block at the wrong place.
                let e = v.check(&buf[..B], 4096 + B as u64, B).unwrap_err();
                assert!(e.contains("misdirected"), "{kind}: {e}");
                // Written under another kind.
                let other = Verifier::new(Verify::Crc32c, None).unwrap();
                let mut c = vec![0u8; B];
                other.fill(&mut c, 4096, B, 1);
                assert!(v.check(&c, 4096, B).is_err(), "{kind}: crc32c's block");
            }
        }
    }
}
