//! A map from page numbers to page numbers that costs memory in proportion to what was
//! written into it, not to its length: the FTL's logical-to-physical and physical-to-logical
//! maps over a drive of any size (issue 60).
//!
//! Entries are kept in chunks of `CHUNK` consecutive indices. A chunk nothing was written to
//! holds nothing: its entries read as the map's `Fill` (unmapped for a new drive, the identity
//! after a sequential fill, pooled after a bulk precondition). A chunk written a few times
//! keeps its entries in a short sorted list (16 bytes each); past `SPARSE_MAX` of them it
//! turns into a plain array, which is what every chunk of a densely written map becomes, so
//! the common case is one array index behind one pointer. The arrays hold 4-byte entries
//! when every value the map can hold fits (a drive of up to 16 TiB of 4 KiB pages), 8-byte
//! ones past that: the narrow arrays keep a small drive's maps as compact, and as fast, as
//! plain `u32` vectors were (`ftl_cost`, docs/perf.md). Written by hand: no crate offers a
//! sparse-to-dense paged array with a computed default.

/// Asks the CPU to bring `at`'s cache line in: a hint, with no effect on what the program
/// computes.
#[inline(always)]
fn prefetch<T>(at: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault; `at` is a valid
    // reference besides.
    unsafe {
        std::arch::x86_64::_mm_prefetch(
            (at as *const T).cast::<i8>(),
            std::arch::x86_64::_MM_HINT_T0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// What an entry no chunk holds reads as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Every entry is this value.
    Value(u64),
    /// Entry `i` is `i` below `below`, and `above` from there on.
    Identity { below: u64, above: u64 },
}

impl Fill {
    #[inline]
    fn at(self, i: u64) -> u64 {
        match self {
            Fill::Value(v) => v,
            Fill::Identity { below, above } => {
                if i < below {
                    i
                } else {
                    above
                }
            }
        }
    }
}

/// log2 of the entries in a chunk.
const CHUNK_SHIFT: u32 = 12;
const CHUNK: usize = 1 << CHUNK_SHIFT;
/// Entries a chunk keeps in its sorted list before it becomes an array (a quarter of the
/// array's bytes).
const SPARSE_MAX: usize = CHUNK / 8;

/// Values from here up are the two sentinels (`u64::MAX - 1`, `u64::MAX`) in a narrow array.
const NARROW_SENTINELS: u32 = u32::MAX - 1;

/// `v` in a narrow array: itself, or a sentinel's narrow form.
#[inline]
fn narrow(v: u64) -> u32 {
    if v >= u64::MAX - 1 {
        (v - (u64::MAX - u64::from(u32::MAX))) as u32
    } else {
        debug_assert!(v < u64::from(NARROW_SENTINELS), "{v} in a narrow map");
        v as u32
    }
}

#[inline]
fn widen(x: u32) -> u64 {
    if x >= NARROW_SENTINELS {
        u64::from(x) + (u64::MAX - u64::from(u32::MAX))
    } else {
        u64::from(x)
    }
}

#[derive(Clone, Debug)]
enum Chunk {
    Empty,
    /// `(index in the chunk, value)`, sorted by index. Boxed so a directory entry stays 16
    /// bytes, not 32: a 64 TiB drive's two directories hold 8.5 M of them, mostly empty.
    #[allow(clippy::box_collection)]
    Sparse(Box<Vec<(u16, u64)>>),
    Narrow(Box<[u32; CHUNK]>),
    Wide(Box<[u64; CHUNK]>),
}

#[derive(Clone, Debug)]
pub(crate) struct PagedMap {
    len: u64,
    fill: Fill,
    chunks: Vec<Chunk>,
    /// Whether arrays hold 4-byte entries (every value below `NARROW_SENTINELS`).
    narrow: bool,
    /// Bytes the chunks' entries take (the directory apart).
    entry_bytes: u64,
}

impl PagedMap {
    /// `len` entries, every one reading as `fill`, each set to a value below `values` or to
    /// one of the two largest `u64`s.
    pub(crate) fn new(len: u64, values: u64, fill: Fill) -> PagedMap {
        let chunks = len.div_ceil(CHUNK as u64) as usize;
        PagedMap {
            len,
            fill,
            chunks: vec![Chunk::Empty; chunks],
            narrow: values <= u64::from(NARROW_SENTINELS),
            entry_bytes: 0,
        }
    }

    /// Forgets every entry written: all read as `fill` again.
    pub(crate) fn reset(&mut self, fill: Fill) {
        self.fill = fill;
        self.chunks.fill(Chunk::Empty);
        self.entry_bytes = 0;
    }

    /// Host memory the map takes: its directory and its chunks.
    pub(crate) fn bytes(&self) -> u64 {
        (self.chunks.len() * std::mem::size_of::<Chunk>()) as u64 + self.entry_bytes
    }

    /// What a map of `len` entries takes with nothing written: its directory.
    pub(crate) fn directory_bytes(len: u64) -> u64 {
        len.div_ceil(CHUNK as u64) * std::mem::size_of::<Chunk>() as u64
    }

    /// What a map of `len` entries below `values` takes with every entry written.
    pub(crate) fn dense_bytes(len: u64, values: u64) -> u64 {
        let chunks = len.div_ceil(CHUNK as u64);
        let entry = if values <= u64::from(NARROW_SENTINELS) {
            4
        } else {
            8
        };
        chunks * (std::mem::size_of::<Chunk>() + CHUNK * entry) as u64
    }

    #[inline(always)]
    pub(crate) fn get(&self, i: u64) -> u64 {
        debug_assert!(i < self.len, "entry {i} of a map of {}", self.len);
        let at = (i & (CHUNK as u64 - 1)) as usize;
        match &self.chunks[(i >> CHUNK_SHIFT) as usize] {
            Chunk::Narrow(entries) => widen(entries[at]),
            Chunk::Wide(entries) => entries[at],
            chunk => self.get_slow(chunk, i),
        }
    }

    /// `get` from a chunk that is not an array.
    #[cold]
    #[inline(never)]
    fn get_slow(&self, chunk: &Chunk, i: u64) -> u64 {
        let at = (i & (CHUNK as u64 - 1)) as u16;
        match chunk {
            Chunk::Sparse(list) => match list.binary_search_by_key(&at, |e| e.0) {
                Ok(k) => list[k].1,
                Err(_) => self.fill.at(i),
            },
            _ => self.fill.at(i),
        }
    }

    #[inline(always)]
    pub(crate) fn set(&mut self, i: u64, value: u64) {
        debug_assert!(i < self.len, "entry {i} of a map of {}", self.len);
        let at = (i & (CHUNK as u64 - 1)) as usize;
        let c = (i >> CHUNK_SHIFT) as usize;
        match &mut self.chunks[c] {
            Chunk::Narrow(entries) => entries[at] = narrow(value),
            Chunk::Wide(entries) => entries[at] = value,
            _ => self.set_slow(c, at, value),
        }
    }

    /// `set` into a chunk that is not an array yet.
    #[cold]
    #[inline(never)]
    fn set_slow(&mut self, c: usize, at: usize, value: u64) {
        let first = (c as u64) << CHUNK_SHIFT;
        match &mut self.chunks[c] {
            Chunk::Narrow(_) | Chunk::Wide(_) => unreachable!("arrays are set in `set`"),
            Chunk::Empty => {
                self.chunks[c] = Chunk::Sparse(Box::new(vec![(at as u16, value)]));
                self.entry_bytes += 16;
            }
            Chunk::Sparse(list) => match list.binary_search_by_key(&(at as u16), |e| e.0) {
                Ok(k) => list[k].1 = value,
                Err(k) if list.len() < SPARSE_MAX => {
                    let before = list.capacity();
                    list.insert(k, (at as u16, value));
                    self.entry_bytes += 16 * (list.capacity() - before) as u64;
                }
                Err(_) => {
                    let mut values = Box::new([0u64; CHUNK]);
                    for (j, e) in values.iter_mut().enumerate() {
                        *e = self.fill.at(first + j as u64);
                    }
                    for &(j, v) in list.iter() {
                        values[j as usize] = v;
                    }
                    values[at] = value;
                    self.entry_bytes -= 16 * list.capacity() as u64;
                    self.chunks[c] = if self.narrow {
                        self.entry_bytes += (CHUNK * 4) as u64;
                        let mut entries = Box::new([0u32; CHUNK]);
                        for (e, &v) in entries.iter_mut().zip(values.iter()) {
                            *e = narrow(v);
                        }
                        Chunk::Narrow(entries)
                    } else {
                        self.entry_bytes += (CHUNK * 8) as u64;
                        Chunk::Wide(values)
                    };
                }
            },
        }
    }

    /// Asks the CPU for entry `i`'s cache line if it is in an array (a hint: no effect on
    /// what the program computes).
    #[inline(always)]
    pub(crate) fn prefetch(&self, i: u64) {
        let at = (i & (CHUNK as u64 - 1)) as usize;
        match self.chunks.get((i >> CHUNK_SHIFT) as usize) {
            Some(Chunk::Narrow(entries)) => prefetch(&entries[at]),
            Some(Chunk::Wide(entries)) => prefetch(&entries[at]),
            _ => {}
        }
    }

    /// Every entry, in order (tests and consistency checks: the whole length).
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len).map(|i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_as_the_fill_until_written_and_the_map_grows_with_what_is_written() {
        let mut m = PagedMap::new(
            10 * CHUNK as u64,
            u64::MAX - 1,
            Fill::Identity {
                below: 3 * CHUNK as u64,
                above: u64::MAX,
            },
        );
        let empty = m.bytes();
        assert_eq!((m.get(5), m.get(4 * CHUNK as u64)), (5, u64::MAX));
        // A few entries in one chunk: a short list.
        for i in [7u64, 3, 9] {
            m.set(i, 100 + i);
        }
        assert_eq!((m.get(3), m.get(7), m.get(9), m.get(8)), (103, 107, 109, 8));
        assert!(
            m.bytes() - empty <= 64,
            "three entries took {} bytes",
            m.bytes() - empty
        );
        // Past SPARSE_MAX the chunk becomes an array and keeps every value and the fill.
        for i in 0..SPARSE_MAX as u64 + 1 {
            m.set(CHUNK as u64 + 2 * i, i);
        }
        assert_eq!(m.get(CHUNK as u64 + 2 * 10), 10);
        assert_eq!(m.get(CHUNK as u64 + 1), CHUNK as u64 + 1);
        assert_eq!(m.get(3), 103, "the other chunk is untouched");
        assert!(m.bytes() >= empty + (CHUNK * 8) as u64);
        m.reset(Fill::Value(4));
        assert_eq!((m.get(3), m.bytes()), (4, empty));
    }

    #[test]
    fn the_map_reads_back_what_a_vec_would_narrow_or_wide() {
        use rand::{Rng, SeedableRng};
        for values in [1u64 << 20, u64::MAX - 1] {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
            let len = 3 * CHUNK as u64 + 17;
            let mut m = PagedMap::new(len, values, Fill::Value(u64::MAX));
            let mut v = vec![u64::MAX; len as usize];
            for _ in 0..20_000 {
                // Mostly one chunk, so it goes through the list and into an array.
                let i = if rng.gen_bool(0.8) {
                    rng.gen_range(0..CHUNK as u64)
                } else {
                    rng.gen_range(0..len)
                };
                let value = match rng.gen_range(0..10) {
                    0 => u64::MAX,
                    1 => u64::MAX - 1,
                    _ => rng.gen_range(0..values),
                };
                m.set(i, value);
                v[i as usize] = value;
            }
            assert!(m.iter().eq(v.iter().copied()), "values below {values}");
        }
    }
}
