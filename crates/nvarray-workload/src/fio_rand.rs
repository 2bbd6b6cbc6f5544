//! fio's own random numbers, where a job's offsets must fall where real fio's do: the
//! `pareto` and `normal` distributions put most requests on a few blocks whose *positions*
//! come from fio's generator, its seed and its hash, so an access histogram matches fio's
//! only if these are fio's (issue 43; measured against fio 3.33's `write_iolog`).
//!
//! Written from fio 3.33's documented behaviour and its sources' arithmetic (lib/rand.h,
//! lib/rand.c, hash.h, init.c, filesetup.c), not copied:
//!
//! - [`Taus88`]: L'Ecuyer's three-component Tausworthe generator with fio's seeding (an LCG
//!   from the seed, components nudged above their minimums, six outputs discarded).
//! - [`jhash`]: Jenkins' lookup2 hash as fio has it, which adds single *bytes* of each 12-byte
//!   block (not 32-bit words); fio seeds a file's skewed offsets with it.
//! - [`skew_seed`]: the seed of a job thread's skewed offsets: `jhash(file name) x thread
//!   number` by default; with a `randseed` of the user's, what fio uses with `randrepeat=0`.
//! - [`scatter`]: fio's golden-ratio multiply, which scatters ranks over the file.

/// `__hash_u64`'s multiplier (fio's `GOLDEN_RATIO_64`).
const GOLDEN_RATIO_64: u64 = 0x61c8_8646_80b5_83eb;

/// The seed stream's multiplier (`init.c`).
const SEED_STEP: u64 = 0x9e37_0001;

/// Index of the block-offset stream in fio's per-thread seed table (`FIO_RAND_BLOCK_OFF`).
const BLOCK_OFF: usize = 6;

/// fio's default `randseed` (0x89); any other value is the user's.
pub(crate) const RANDSEED_FIO_DEFAULT: u64 = 0x89;

/// fio's 32-bit Tausworthe generator (`taus88`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taus88 {
    s: [u32; 3],
}

impl Taus88 {
    /// Seeded as fio seeds it: the seed is cut to 32 bits.
    pub(crate) fn new(seed: u64) -> Taus88 {
        let seed = seed as u32;
        let lcg = |x: u32| x.wrapping_mul(69_069) ^ seed;
        let at_least = |x: u32, min: u32| if x < min { x + min } else { x };
        // 53 is fio's `2^31 + 2^17 + 2^7` evaluated with C's `^` (xor): 29 + 19 + 5.
        let s1 = at_least(lcg(53), 1);
        let s2 = at_least(lcg(s1), 7);
        let s3 = at_least(lcg(s2), 15);
        let mut t = Taus88 { s: [s1, s2, s3] };
        for _ in 0..6 {
            t.next_u32();
        }
        t
    }

    #[inline]
    pub(crate) fn next_u32(&mut self) -> u32 {
        let step =
            |s: u32, a: u32, b: u32, mask: u32, d: u32| ((s & mask) << d) ^ (((s << a) ^ s) >> b);
        self.s[0] = step(self.s[0], 13, 19, 0xffff_fffe, 12);
        self.s[1] = step(self.s[1], 2, 25, 0xffff_fff8, 4);
        self.s[2] = step(self.s[2], 3, 11, 0xffff_fff0, 17);
        self.s[0] ^ self.s[1] ^ self.s[2]
    }
}

/// fio's per-thread seed table entry `index` for `randseed` and 1-based `thread_number`.
fn seed_table(randseed: u64, thread_number: u64, index: usize) -> u64 {
    let mut s = randseed;
    for _ in 0..4 {
        s = s.wrapping_mul(SEED_STEP);
    }
    for _ in 0..index {
        s = s.wrapping_mul(SEED_STEP);
    }
    s.wrapping_mul(thread_number).wrapping_add(index as u64)
}

/// The seed of the skewed offsets (`pareto`, `normal`) of the thread numbered
/// `thread_number` (1-based, over every job and clone of the job file, as fio counts) whose
/// file is `file_name`: fio's default, `jhash(file name) x thread number`, while `randseed` is
/// fio's default; else the seed fio uses for `randseed` with `randrepeat=0` (with
/// `randrepeat=1`, fio 3.33 would ignore the value: nvarray lets a seed change the requests).
pub(crate) fn skew_seed(randseed: u64, file_name: &str, thread_number: u64) -> u64 {
    if randseed == RANDSEED_FIO_DEFAULT {
        u64::from(jhash(file_name.as_bytes()).wrapping_mul(thread_number as u32))
    } else {
        seed_table(randseed, thread_number, BLOCK_OFF)
    }
}

/// fio's `__hash_u64`: the rank scattered over 64 bits.
#[inline]
pub(crate) fn scatter(rank: u64) -> u64 {
    rank.wrapping_mul(GOLDEN_RATIO_64)
}

/// Jenkins' lookup2 hash with initial value 0, as fio's `jhash` computes it.
pub(crate) fn jhash(key: &[u8]) -> u32 {
    let golden = 0x61c8_8647u32.wrapping_add(key.len() as u32);
    let (mut a, mut b, mut c) = (golden, golden, golden);
    let mut rest = key;
    while rest.len() > 12 {
        // fio adds one byte of each word, not the word.
        a = a.wrapping_add(u32::from(rest[0]));
        b = b.wrapping_add(u32::from(rest[4]));
        c = c.wrapping_add(u32::from(rest[8]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    if !rest.is_empty() {
        let byte = |i: usize, shift: u32| rest.get(i).map_or(0, |&b| u32::from(b) << shift);
        c = c
            .wrapping_add(byte(11, 24))
            .wrapping_add(byte(10, 16))
            .wrapping_add(byte(9, 8))
            .wrapping_add(byte(8, 0));
        b = b
            .wrapping_add(byte(7, 24))
            .wrapping_add(byte(6, 16))
            .wrapping_add(byte(5, 8))
            .wrapping_add(byte(4, 0));
        a = a
            .wrapping_add(byte(3, 24))
            .wrapping_add(byte(2, 16))
            .wrapping_add(byte(1, 8))
            .wrapping_add(byte(0, 0));
        finish(&mut a, &mut b, &mut c);
    }
    c
}

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c) ^ c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a) ^ a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b) ^ b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c) ^ c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a) ^ a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b) ^ b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taus88_components_start_above_their_minimums_and_differ_by_seed() {
        let a = Taus88::new(1);
        let b = Taus88::new(2);
        assert!(a.s[0] >= 1 && a.s[1] >= 7 && a.s[2] >= 15);
        assert_ne!(a.s, b.s);
        // Seeds equal in their low 32 bits are the same generator, as in fio.
        let mut c = Taus88::new(1 + (1 << 32));
        let mut a = a;
        assert_eq!(a.next_u32(), c.next_u32());
    }

    #[test]
    fn a_user_seed_changes_the_skewed_stream_and_the_default_follows_the_file_name() {
        assert_ne!(skew_seed(0x89, "a", 1), skew_seed(0x89, "b", 1));
        assert_ne!(skew_seed(0x89, "a", 1), skew_seed(0x89, "a", 2));
        assert_ne!(skew_seed(7, "a", 1), skew_seed(8, "a", 1));
        assert_eq!(skew_seed(7, "a", 1), skew_seed(7, "b", 1));
    }
}
