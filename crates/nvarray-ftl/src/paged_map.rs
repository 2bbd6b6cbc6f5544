//! A map from page numbers to page numbers that costs memory in proportion to what was
//! written into it, not to its length: the FTL's logical-to-physical and physical-to-logical
//! maps over a drive of any size (issue 60).
//!
//! Entries are kept in chunks of `CHUNK` consecutive indices, each with a 4-byte directory
//! entry. A chunk nothing was written to holds nothing: its entries read as the map's `Fill`
//! (unmapped for a new drive, the identity after a sequential fill, pooled after a bulk
//! precondition). A chunk written a few times keeps its entries in a short sorted list (16
//! bytes each) when the map is too large to write densely; past `SPARSE_MAX` of them, or at
//! once for a map that fits, it turns into an array of 4-byte entries when every value the
//! map can hold fits (a drive of up to 16 TiB of 4 KiB pages), 8-byte ones past that. The
//! arrays lie one after another in one allocation per map: a densely written map is then as
//! compact and as contiguous as a plain `u32` vector (huge pages, few TLB misses; separate
//! allocations per chunk cost the precondition 25 %, `ftl_cost`, docs/perf.md). Written by
//! hand: no crate offers a sparse-to-dense paged array with a computed default.

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
const SPARSE_MAX: usize = CHUNK / 16;

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

/// A directory entry with nothing written.
const EMPTY: u32 = u32::MAX;
/// Set in a directory entry that indexes a sorted list rather than an array.
const LISTED: u32 = 1 << 31;

#[derive(Clone, Debug)]
pub(crate) struct PagedMap {
    len: u64,
    fill: Fill,
    /// Per chunk: `EMPTY`, `LISTED | k` (its entries in `lists[k]`), or `k` (its array is
    /// the `k`-th `CHUNK` entries of the slab).
    chunks: Vec<u32>,
    /// `(index in the chunk, value)`, sorted by index, per listed chunk.
    lists: Vec<Vec<(u16, u64)>>,
    /// The arrays, one after another in one allocation (4-byte or 8-byte entries): a map
    /// written densely is then as contiguous as a plain vector, so the kernel can back it
    /// with huge pages and random lookups miss the TLB as rarely.
    narrow_slab: Vec<u32>,
    wide_slab: Vec<u64>,
    /// Whether arrays hold 4-byte entries (every value below `NARROW_SENTINELS`).
    narrow: bool,
    /// Whether a chunk's first entries go into a sorted list (a map too large to write
    /// densely) or straight into an array.
    sparse_first: bool,
    /// Bytes the lists take.
    list_bytes: u64,
}

impl PagedMap {
    /// `len` entries, every one reading as `fill`, each set to a value below `values` or to
    /// one of the two largest `u64`s.
    pub(crate) fn new(len: u64, values: u64, fill: Fill) -> PagedMap {
        let chunks = len.div_ceil(CHUNK as u64) as usize;
        PagedMap {
            len,
            fill,
            chunks: vec![EMPTY; chunks],
            lists: Vec::new(),
            narrow_slab: Vec::new(),
            wide_slab: Vec::new(),
            narrow: values <= u64::from(NARROW_SENTINELS),
            sparse_first: true,
            list_bytes: 0,
        }
    }

    /// Whether a chunk's first entries go into a sorted list, as by default: worth it when
    /// writes are scattered over a map too large to hold as arrays, a cost (each list grows
    /// by insertion to `SPARSE_MAX` before it turns into an array) when the map will be
    /// written densely anyway.
    pub(crate) fn sparse_first(mut self, sparse: bool) -> PagedMap {
        self.sparse_first = sparse;
        self
    }

    /// Forgets every entry written: all read as `fill` again.
    pub(crate) fn reset(&mut self, fill: Fill) {
        self.fill = fill;
        self.chunks.fill(EMPTY);
        self.lists = Vec::new();
        self.narrow_slab = Vec::new();
        self.wide_slab = Vec::new();
        self.list_bytes = 0;
    }

    /// Host memory the map takes: its directory, lists and arrays (as allocated).
    pub(crate) fn bytes(&self) -> u64 {
        Self::directory_bytes(self.len)
            + self.list_bytes
            + (self.lists.capacity() * std::mem::size_of::<Vec<(u16, u64)>>()) as u64
            + (self.narrow_slab.capacity() * 4 + self.wide_slab.capacity() * 8) as u64
    }

    /// What a map of `len` entries takes with nothing written: its directory.
    pub(crate) fn directory_bytes(len: u64) -> u64 {
        len.div_ceil(CHUNK as u64) * 4
    }

    /// What a map of `len` entries below `values` takes with every entry written.
    pub(crate) fn dense_bytes(len: u64, values: u64) -> u64 {
        let entry = if values <= u64::from(NARROW_SENTINELS) {
            4
        } else {
            8
        };
        Self::directory_bytes(len) + len.div_ceil(CHUNK as u64) * (CHUNK as u64) * entry
    }

    #[inline(always)]
    pub(crate) fn get(&self, i: u64) -> u64 {
        debug_assert!(i < self.len, "entry {i} of a map of {}", self.len);
        let at = (i & (CHUNK as u64 - 1)) as usize;
        let k = self.chunks[(i >> CHUNK_SHIFT) as usize];
        if k < LISTED {
            let at = k as usize * CHUNK + at;
            return if self.narrow {
                widen(self.narrow_slab[at])
            } else {
                self.wide_slab[at]
            };
        }
        self.get_slow(k, i)
    }

    /// `get` from a chunk that is not an array.
    #[cold]
    #[inline(never)]
    fn get_slow(&self, k: u32, i: u64) -> u64 {
        if k == EMPTY {
            return self.fill.at(i);
        }
        let at = (i & (CHUNK as u64 - 1)) as u16;
        let list = &self.lists[(k & !LISTED) as usize];
        match list.binary_search_by_key(&at, |e| e.0) {
            Ok(n) => list[n].1,
            Err(_) => self.fill.at(i),
        }
    }

    #[inline(always)]
    pub(crate) fn set(&mut self, i: u64, value: u64) {
        debug_assert!(i < self.len, "entry {i} of a map of {}", self.len);
        let at = (i & (CHUNK as u64 - 1)) as usize;
        let c = (i >> CHUNK_SHIFT) as usize;
        let k = self.chunks[c];
        if k < LISTED {
            let at = k as usize * CHUNK + at;
            if self.narrow {
                self.narrow_slab[at] = narrow(value);
            } else {
                self.wide_slab[at] = value;
            }
            return;
        }
        self.set_slow(c, at, value);
    }

    /// `set` into a chunk that is not an array yet.
    #[cold]
    #[inline(never)]
    fn set_slow(&mut self, c: usize, at: usize, value: u64) {
        let k = self.chunks[c];
        let list = if k == EMPTY {
            if self.sparse_first {
                self.chunks[c] = LISTED | self.lists.len() as u32;
                self.lists.push(vec![(at as u16, value)]);
                self.list_bytes += 16;
                return;
            }
            Vec::new()
        } else {
            let list = &mut self.lists[(k & !LISTED) as usize];
            match list.binary_search_by_key(&(at as u16), |e| e.0) {
                Ok(n) => {
                    list[n].1 = value;
                    return;
                }
                Err(n) if list.len() < SPARSE_MAX => {
                    let before = list.capacity();
                    list.insert(n, (at as u16, value));
                    self.list_bytes += 16 * (list.capacity() - before) as u64;
                    return;
                }
                Err(_) => {
                    self.list_bytes -= 16 * list.capacity() as u64;
                    std::mem::take(list)
                }
            }
        };
        self.make_array(c, &list);
        self.set((c as u64) << CHUNK_SHIFT | at as u64, value);
    }

    /// Turns chunk `c` into an array at the slab's end, holding the fill and `list`'s
    /// entries. The slab grows by an eighth at a time (at least one chunk), so it holds at
    /// most that much unused.
    fn make_array(&mut self, c: usize, list: &[(u16, u64)]) {
        let first = (c as u64) << CHUNK_SHIFT;
        let k = if self.narrow {
            self.narrow_slab.len() / CHUNK
        } else {
            self.wide_slab.len() / CHUNK
        };
        assert!(k < LISTED as usize, "a map of more than 2^31 arrays");
        let value = |j: usize| {
            list.binary_search_by_key(&(j as u16), |e| e.0)
                .map_or_else(|_| self.fill.at(first + j as u64), |n| list[n].1)
        };
        if self.narrow {
            let slab = &self.narrow_slab;
            let grow = (slab.len() / 8).max(CHUNK);
            let mut slab = std::mem::take(&mut self.narrow_slab);
            if slab.capacity() - slab.len() < CHUNK {
                slab.reserve_exact(grow);
            }
            slab.extend((0..CHUNK).map(|j| narrow(value(j))));
            self.narrow_slab = slab;
        } else {
            let grow = (self.wide_slab.len() / 8).max(CHUNK);
            let mut slab = std::mem::take(&mut self.wide_slab);
            if slab.capacity() - slab.len() < CHUNK {
                slab.reserve_exact(grow);
            }
            slab.extend((0..CHUNK).map(value));
            self.wide_slab = slab;
        }
        self.chunks[c] = k as u32;
    }

    /// Asks the CPU for entry `i`'s cache line if it is in an array (a hint: no effect on
    /// what the program computes).
    #[inline(always)]
    pub(crate) fn prefetch(&self, i: u64) {
        let Some(&k) = self.chunks.get((i >> CHUNK_SHIFT) as usize) else {
            return;
        };
        if k < LISTED {
            let at = k as usize * CHUNK + (i & (CHUNK as u64 - 1)) as usize;
            if self.narrow {
                prefetch(&self.narrow_slab[at]);
            } else {
                prefetch(&self.wide_slab[at]);
            }
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
        // 16 bytes an entry (the list grows by 4) and the lists' own headers.
        assert!(
            m.bytes() - empty <= 4 * 16 + 4 * 24,
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
    fn the_map_reads_back_what_a_vec_would_narrow_or_wide_listed_first_or_not() {
        use rand::{Rng, SeedableRng};
        for (values, sparse) in [(1u64 << 20, true), (u64::MAX - 1, true), (1 << 20, false)] {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
            let len = 3 * CHUNK as u64 + 17;
            let mut m = PagedMap::new(len, values, Fill::Value(u64::MAX)).sparse_first(sparse);
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
            assert!(
                m.iter().eq(v.iter().copied()),
                "values below {values}, sparse {sparse}"
            );
        }
    }
}
