//! Self-checking data for `verify=crc32c`: what a write puts in each device block, and the
//! check every read makes.
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
}
