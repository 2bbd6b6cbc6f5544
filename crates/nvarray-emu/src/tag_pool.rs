//! A lock-free pool of command tags with a per-thread starting hint (Moneta, MICRO'10: "lock
//! free tag pool: compare-and-swap operations, tag indexed data structures, use processor ID as
//! hint for where to search").
//!
//! The pool is a bitmap of `AtomicU64` words, one bit per tag, set while the tag is taken. Each
//! word sits on its own cache line. `acquire(hint)` starts at the word `hint` selects (callers
//! pass `thread_hint()`), so different threads usually take bits from different words and
//! different cache lines; it walks on to the next word only when that one is full. Moneta's
//! hint was the processor's number; a number per thread, fixed at its first command, spreads
//! threads the same way without asking the CPU per command (`sched_getcpu`, 45 instructions
//! of the emulator's path per request, issue 38), and a thread that migrates keeps its word.
//!
//! Small pools are spread over up to `WORDS_SPREAD` words rather than packed into one: Moneta
//! has 64 tags, and one 64-bit word would make every CPU contend on the same cache line, which
//! is exactly what the hint is meant to avoid.
//!
//! Taking a bit is a single-bit `fetch_or` rather than a compare-and-swap of the whole word.
//! Both are one atomic read-modify-write (x86 compiles the single-bit `fetch_or` to
//! `lock bts`), but a CAS also fails when some *other* bit of the word changed, such as a
//! release, while a `fetch_or` fails only when another thread took the very same bit. Either
//! way a failure means some other thread made progress, so the pool is lock-free; every retry
//! loop is still bounded (`ATTEMPTS_PER_WORD_MAX`).
//!
//! The pool hands out tag *numbers*; it cannot know which thread holds a tag. Releasing a tag
//! that is free is caught (`TagPoolError::NotTaken`), but a release of a tag held by someone
//! else succeeds: the caller's protocol (one owner per tag, as for the per-tag DMA buffers in
//! `arena`) must rule that out.

#![deny(clippy::undocumented_unsafe_blocks)]

use std::fmt;

use thiserror::Error;

use crate::sync::{AtomicU64, Ordering};

/// Most tags in one pool. A `Tag` is a `u16`, and 4096 tags over 64-bit words is 64 words,
/// 8 KiB of cache lines at most.
pub const TAGS_MAX: usize = 4096;
/// Bits in one bitmap word.
const WORD_BITS: usize = u64::BITS as usize;
/// Small pools are spread over at least this many words (or one word per tag if there are
/// fewer tags), so up to this many CPUs start their search on distinct cache lines.
const WORDS_SPREAD: usize = 16;
/// Most bitmap words: a full-size pool at 64 tags per word.
const WORDS_MAX: usize = TAGS_MAX / WORD_BITS;
/// Most read-modify-write attempts on one word in one `acquire` before moving to the next word.
/// An attempt fails only if another thread took the same bit between our load and our
/// `fetch_or`, and each failure leaves one fewer free bit in our view of the word, so 64
/// failures in a row need 64 other acquisitions to race with us on one word. With the words
/// bound this caps one `acquire` at `WORDS_MAX * ATTEMPTS_PER_WORD_MAX` = 4096 attempts.
const ATTEMPTS_PER_WORD_MAX: usize = WORD_BITS;

const _: () = assert!(TAGS_MAX.is_power_of_two());
const _: () = assert!(TAGS_MAX <= u16::MAX as usize + 1);
const _: () = assert!(TAGS_MAX.is_multiple_of(WORD_BITS));
const _: () = assert!(WORDS_SPREAD <= WORDS_MAX);
const _: () = assert!(WORDS_SPREAD.is_power_of_two());

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TagPoolError {
    #[error("tag pool size {tags} is out of range: expected 1 to {TAGS_MAX}")]
    Tags { tags: usize },
    #[error("tag {tag} is out of range: expected 0 to {}", .tags - 1)]
    OutOfRange { tag: Tag, tags: usize },
    #[error("tag {0} is not taken: it was released twice or never acquired")]
    NotTaken(Tag),
}

/// A command tag: indexes the per-tag state (DMA buffer, scoreboard slot) of one command in
/// flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(u16);

impl Tag {
    /// A tag from its number, for tags that come back from outside (a completion, a request
    /// header). `TagPool::release` checks it against the pool's range.
    pub const fn new(raw: u16) -> Tag {
        Tag(raw)
    }

    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The tag's number as the wire formats carry it (command word, NVMe command identifier).
    pub const fn raw(self) -> u16 {
        self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The pool. It is `Sync`: share it by reference or `Arc` among the threads that issue commands.
pub struct TagPool {
    /// Bit `b` of word `w` is tag `w << bits_per_word_log2 | b`; set means taken. Bits that do
    /// not correspond to a tag (above `bits_per_word`, or past `tags` in the last word) are set
    /// from the start, so they look permanently taken and `acquire` never returns them.
    words: Box<[CachePadded<AtomicU64>]>,
    tags: usize,
    bits_per_word_log2: u32,
    /// Set bits that are not tags; `in_use` subtracts them.
    padding_bits: usize,
}

/// Keeps each bitmap word on cache lines of its own (128 bytes for the adjacent-line prefetcher,
/// as in `ring`), so CPUs working in different words do not false-share.
#[repr(align(128))]
struct CachePadded<T>(T);

impl TagPool {
    /// A pool of `tags` free tags, numbered `0..tags`.
    pub fn new(tags: usize) -> Result<Self, TagPoolError> {
        if !(1..=TAGS_MAX).contains(&tags) {
            return Err(TagPoolError::Tags { tags });
        }
        let words_wanted = tags.div_ceil(WORD_BITS).max(tags.min(WORDS_SPREAD));
        // A power of two so that tag <-> (word, bit) is a shift and a mask.
        let bits_per_word = tags.div_ceil(words_wanted).next_power_of_two();
        assert!(bits_per_word <= WORD_BITS);
        let words = tags.div_ceil(bits_per_word);
        assert!(words >= 1);
        assert!(words <= WORDS_MAX);
        assert!(words * bits_per_word >= tags);
        let bitmap: Box<[CachePadded<AtomicU64>]> = (0..words)
            .map(|w| {
                let valid_bits = bits_per_word.min(tags - w * bits_per_word);
                CachePadded(AtomicU64::new(!low_bits(valid_bits)))
            })
            .collect();
        Ok(TagPool {
            words: bitmap,
            tags,
            bits_per_word_log2: bits_per_word.trailing_zeros(),
            padding_bits: words * WORD_BITS - tags,
        })
    }

    pub fn tags(&self) -> usize {
        self.tags
    }

    /// Takes a free tag, searching from the word `hint` selects (pass `thread_hint()`; any value is
    /// accepted). Returns `None` when every word was seen full during the call (each at its
    /// own instant: the words are not read as one snapshot), or, under extreme contention, when
    /// `ATTEMPTS_PER_WORD_MAX` attempts on a word all lost races; callers treat both as "queue
    /// full, retry later". A tag whose release happens before this call is always seen free.
    pub fn acquire(&self, hint: usize) -> Option<Tag> {
        let words = self.words.len();
        // No division when the hint is a word's number already (a thread's usually is).
        let mut w = if hint < words { hint } else { hint % words };
        for _ in 0..words {
            let at = w;
            w = if w + 1 == words { 0 } else { w + 1 };
            let word = &self.words[at].0;
            // Acquire, although the `fetch_or` below decides which bit is ours: when this load
            // shows the word full and we move on, we must also see every release the word's
            // last writer made before writing it (its `fetch_or` is a Release for this reason).
            // Otherwise a thread can see word 0 freshly taken by thread A, yet a stale "taken"
            // on word 1 that A released just before, and return None with a tag free. Loom
            // finds that run when the `fetch_or` is Acquire only; it does not find it for a
            // Relaxed load here, but the C++ model allows it just the same.
            let mut seen = word.load(Ordering::Acquire);
            for _ in 0..ATTEMPTS_PER_WORD_MAX {
                let free = !seen;
                if free == 0 {
                    break;
                }
                let bit = free.trailing_zeros();
                let mask = 1u64 << bit;
                // Acquire pairs with the Release in `release`: the previous holder's use of the
                // tag-indexed state happens before ours. Release makes our earlier releases of
                // other tags visible to whoever later finds this word full (see the load above),
                // so "every word looked full" never rests on a stale view of a freed tag.
                let previous = word.fetch_or(mask, Ordering::AcqRel);
                if previous & mask == 0 {
                    let index = (at << self.bits_per_word_log2) | bit as usize;
                    assert!(index < self.tags);
                    // `index < tags <= TAGS_MAX`, which fits in a u16 (const-asserted above).
                    return Some(Tag(index as u16));
                }
                // Another thread took this bit first; `previous` is a fresher view of the word.
                seen = previous;
            }
        }
        None
    }

    /// Returns `tag` to the pool. Errors, without changing the pool, when `tag` is out of range
    /// or not taken, so a bad tag from outside cannot corrupt the pool.
    pub fn release(&self, tag: Tag) -> Result<(), TagPoolError> {
        let index = tag.index();
        if index >= self.tags {
            return Err(TagPoolError::OutOfRange {
                tag,
                tags: self.tags,
            });
        }
        let w = index >> self.bits_per_word_log2;
        let mask = 1u64 << (index & ((1 << self.bits_per_word_log2) - 1));
        // Release pairs with the Acquire in `acquire`: our use of the tag-indexed state happens
        // before the next holder's. Clearing an already-clear bit changes nothing, so the error
        // case below leaves the pool as it was.
        let previous = self.words[w].0.fetch_and(!mask, Ordering::Release);
        if previous & mask == 0 {
            return Err(TagPoolError::NotTaken(tag));
        }
        Ok(())
    }

    /// Tags taken now: a snapshot (the words are read one by one), exact when the pool is idle.
    pub fn in_use(&self) -> usize {
        let set_bits: usize = self
            .words
            .iter()
            // Relaxed: a count, not a hand-over of any state.
            .map(|word| word.0.load(Ordering::Relaxed).count_ones() as usize)
            .sum();
        assert!(set_bits >= self.padding_bits);
        let in_use = set_bits - self.padding_bits;
        assert!(in_use <= self.tags);
        in_use
    }
}

impl fmt::Debug for TagPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagPool")
            .field("tags", &self.tags)
            .field("words", &self.words.len())
            .field("in_use", &self.in_use())
            .finish()
    }
}

/// A word with the low `bits` bits set (`bits` from 1 to 64).
fn low_bits(bits: usize) -> u64 {
    assert!(bits >= 1);
    assert!(bits <= WORD_BITS);
    u64::MAX >> (WORD_BITS - bits)
}

/// The calling thread's hint for `TagPool::acquire`: a number given to each thread at its first
/// call (0, 1, 2, … in the order threads first ask), so threads start their searches on
/// different words. 0 under loom, whose runs must be deterministic.
pub fn thread_hint() -> usize {
    #[cfg(not(loom))]
    {
        use std::cell::Cell;
        use std::sync::atomic::AtomicUsize;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static HINT: Cell<usize> = const { Cell::new(usize::MAX) };
        }
        HINT.with(|hint| {
            if hint.get() == usize::MAX {
                // Relaxed: a counter handing out distinct numbers, nothing else published.
                hint.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % TAGS_MAX);
            }
            hint.get()
        })
    }
    #[cfg(loom)]
    {
        0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;
    use std::thread;

    use super::*;

    #[test]
    fn size_limits() {
        assert_eq!(TagPool::new(0).unwrap_err(), TagPoolError::Tags { tags: 0 });
        assert_eq!(
            TagPool::new(TAGS_MAX + 1).unwrap_err(),
            TagPoolError::Tags { tags: TAGS_MAX + 1 }
        );
        assert_eq!(TagPool::new(1).unwrap().tags(), 1);
        assert_eq!(TagPool::new(TAGS_MAX).unwrap().tags(), TAGS_MAX);
    }

    #[test]
    fn error_messages_name_value_and_range() {
        assert_eq!(
            TagPool::new(5000).unwrap_err().to_string(),
            "tag pool size 5000 is out of range: expected 1 to 4096"
        );
        let pool = TagPool::new(64).unwrap();
        assert_eq!(
            pool.release(Tag::new(64)).unwrap_err().to_string(),
            "tag 64 is out of range: expected 0 to 63"
        );
        assert_eq!(
            pool.release(Tag::new(3)).unwrap_err().to_string(),
            "tag 3 is not taken: it was released twice or never acquired"
        );
    }

    /// Acquires every tag of a `tags`-tag pool (hints cycling over `hint_stride`), checks they
    /// are distinct and in range, that the pool is then empty, and that all release cleanly.
    fn check_exhaust(tags: usize, hint_stride: usize) {
        let pool = TagPool::new(tags).unwrap();
        let mut seen = HashSet::new();
        for i in 0..tags {
            let tag = pool
                .acquire(i * hint_stride)
                .unwrap_or_else(|| panic!("tags={tags}: None after {i} acquisitions"));
            assert!(tag.index() < tags, "tags={tags}: {tag} out of range");
            assert!(seen.insert(tag), "tags={tags}: {tag} handed out twice");
            assert_eq!(pool.in_use(), i + 1);
        }
        for hint in [0, 1, 7, usize::MAX] {
            assert_eq!(
                pool.acquire(hint),
                None,
                "tags={tags}: full pool gave a tag"
            );
        }
        for tag in seen {
            pool.release(tag).unwrap();
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn exhausts_every_size_shape() {
        // One word, partial words, exactly 16 spread words, non-power-of-two, the maximum.
        let shapes: &[usize] = if cfg!(miri) {
            &[1, 3, 16, 17, 64, 65, 1025] // miri runs ~1,000 times slower
        } else {
            &[
                1, 2, 3, 15, 16, 17, 63, 64, 65, 100, 1000, 1023, 1024, 1025, 4095, 4096,
            ]
        };
        for &tags in shapes {
            check_exhaust(tags, 1);
            check_exhaust(tags, 13);
        }
    }

    #[test]
    fn release_then_reacquire() {
        let pool = TagPool::new(2).unwrap();
        let a = pool.acquire(0).unwrap();
        let b = pool.acquire(0).unwrap();
        assert_ne!(a, b);
        assert_eq!(pool.acquire(0), None);
        pool.release(a).unwrap();
        assert_eq!(pool.in_use(), 1);
        assert_eq!(pool.acquire(1), Some(a));
        assert_eq!(pool.acquire(1), None);
    }

    #[test]
    fn bad_releases_error_and_change_nothing() {
        let pool = TagPool::new(100).unwrap();
        let held = pool.acquire(3).unwrap();
        let free = Tag::new(if held.index() == 0 { 1 } else { 0 });
        assert_eq!(pool.release(free), Err(TagPoolError::NotTaken(free)));
        assert_eq!(
            pool.release(Tag::new(100)),
            Err(TagPoolError::OutOfRange {
                tag: Tag::new(100),
                tags: 100
            })
        );
        assert_eq!(
            pool.release(Tag::new(u16::MAX)),
            Err(TagPoolError::OutOfRange {
                tag: Tag::new(u16::MAX),
                tags: 100
            })
        );
        assert_eq!(pool.in_use(), 1);
        pool.release(held).unwrap();
        assert_eq!(pool.release(held), Err(TagPoolError::NotTaken(held)));
        assert_eq!(pool.in_use(), 0);
        // The pool still hands out all 100 tags: no padding bit was cleared by a bad release.
        for _ in 0..100 {
            assert!(pool.acquire(0).is_some());
        }
        assert_eq!(pool.acquire(0), None);
    }

    #[test]
    fn distinct_hints_start_in_distinct_words() {
        // Moneta's 64 tags spread over 16 words of 4: the first tag each of 16 CPUs takes comes
        // from its own word.
        let pool = TagPool::new(64).unwrap();
        assert_eq!(pool.words.len(), WORDS_SPREAD);
        let words: HashSet<usize> = (0..WORDS_SPREAD)
            .map(|cpu| pool.acquire(cpu).unwrap().index() >> pool.bits_per_word_log2)
            .collect();
        assert_eq!(words.len(), WORDS_SPREAD);
    }

    #[test]
    fn threads_get_distinct_hints_and_keep_theirs() {
        let mine = thread_hint();
        assert_eq!(thread_hint(), mine, "a thread's hint does not change");
        let others: HashSet<usize> = (0..4)
            .map(|_| thread::spawn(thread_hint).join().unwrap())
            .collect();
        assert_eq!(others.len(), 4, "each thread its own number: {others:?}");
        assert!(!others.contains(&mine));
        let pool = TagPool::new(8).unwrap();
        let tag = pool.acquire(mine).unwrap();
        pool.release(tag).unwrap();
    }

    /// Threads acquire, hold and release tags in a loop; a shared flag per tag, set while some
    /// thread holds it, catches any tag handed out twice.
    fn check_exclusive(tags: usize, threads: usize, rounds: usize) {
        let pool = TagPool::new(tags).unwrap();
        let held: Vec<AtomicBool> = (0..tags).map(|_| AtomicBool::new(false)).collect();
        thread::scope(|s| {
            for t in 0..threads {
                let (pool, held) = (&pool, &held);
                s.spawn(move || {
                    let mut mine: Vec<Tag> = Vec::with_capacity(2);
                    for round in 0..rounds {
                        // Hold up to two tags at once so releases interleave with acquisitions.
                        if let Some(tag) = pool.acquire(t + round) {
                            let was_held = held[tag.index()].swap(true, Ordering::SeqCst);
                            assert!(!was_held, "tag {tag} handed out while held");
                            mine.push(tag);
                        }
                        if mine.len() == 2 || (round % 3 == 0 && !mine.is_empty()) {
                            let tag = mine.remove(0);
                            // Clear the flag before releasing: after `release` another thread
                            // may rightly take the tag.
                            assert!(held[tag.index()].swap(false, Ordering::SeqCst));
                            pool.release(tag).unwrap();
                        }
                    }
                    for tag in mine {
                        assert!(held[tag.index()].swap(false, Ordering::SeqCst));
                        pool.release(tag).unwrap();
                    }
                });
            }
        });
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn four_threads_never_share_a_tag() {
        let rounds = if cfg!(miri) { 30 } else { 200_000 };
        // Fewer tags than the threads want (contention and `None`), one tag per word, and
        // Moneta's 64.
        check_exclusive(3, 4, rounds);
        check_exclusive(16, 4, rounds);
        check_exclusive(64, 4, rounds);
    }
}
