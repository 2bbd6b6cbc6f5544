//! Deterministic request generators: one [`RequestGen`] per job thread.
//!
//! The simulator calls [`RequestGen::next_request`] around ten million times per second, so
//! everything that can be decided once is decided in [`RequestGen::new`]: slot counts, the
//! length table and the read threshold are integers, and the hot path neither allocates nor
//! touches floating point except inside fio's skewed draws (`skew.rs`: zipf, pareto and
//! normal as fio computes them).

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

use crate::backlog::VerifyBacklog;
use crate::error::{value_error, WorkloadError};
use crate::fio_rand;
use crate::random_map::{RandomMap, Shuffle, RANDOM_MAP_POSITIONS_MAX};
use crate::skew::{FioSkew, ZoneTable};
use crate::spec::{
    BlockSize, Direction, Distribution, JobSpec, Request, RwSequencer, ZoneMode,
    BSSPLIT_ENTRIES_MAX,
};

/// Resolution of the `bssplit` table: one entry per percent.
const PERCENT_SLOTS: usize = 100;

// The length table stores indices as u8.
const _: () = assert!(BSSPLIT_ENTRIES_MAX <= u8::MAX as usize + 1);

/// Issues the requests of one thread of one job, forever; the caller decides when to stop
/// (`runtime_ns`, `number_ios`).
///
/// The sequence depends only on the job, the thread index and the device geometry, so a
/// simulation replays exactly from its inputs. It is stable for a given build of this crate
/// and of `rand` 0.8 (whose `SmallRng` is Xoshiro256++ on 64-bit targets and is not promised
/// to stay the same across `rand` releases).
///
/// Semantics, per [`RwMode`]:
/// - Sequential (`read`, `write`, `rw`): thread `t` starts at
///   `t * (region_len / numjobs)`, rounded down to a block, into the region, so threads do not
///   all touch the same blocks (fio would start them all at the region start unless
///   `offset_increment` is set). Each request starts where the previous one of the same
///   direction ended; a request that would run past the region end starts over at the region
///   start. As in fio, `rw` keeps separate read and write positions.
/// - Random (`randread`, `randwrite`, `randrw`): offsets are block-aligned and drawn so that
///   the request lies inside the region: uniformly over every position where a request of the
///   chosen length fits, or by fio's skewed draws (see [`Distribution::Zipf`]).
/// - Uniform random offsets keep fio's random map unless `norandommap` is set: each aligned
///   position of the region is used once per pass (a draw that lands on a used one moves to
///   the next free one, and a request is cut short where it would run into a used one), and
///   a new pass begins when all are used, as in fio (see `random_map.rs`). The other
///   distributions never use a map (fio sets `norandommap` for them): `zipf`, `pareto` and
///   `normal`, drawn as fio draws them (`skew.rs`, `fio_rand.rs`); `zoned`/`zoned_abs`;
///   `sequence`.
/// - `rw=MODE:N`: a random jump every N requests, the ones between continuing from the
///   previous request of their direction (or repeating it, `rw_sequencer=identical`); in a
///   sequential mode, a gap of N bytes (negative: backwards) between requests.
/// - `zonemode=strided`: offsets are drawn in one zone of `zonerange` at a time, which moves
///   on by `zonerange + zoneskip` after `zonesize` bytes.
/// - Mixed (`rw`, `randrw`): each request is independently a read with probability
///   `rwmixread / 100`.
/// - `bssplit`: each request independently picks its length by the percentages.
/// - `bsrange`: each request independently picks a multiple of the smallest length, each
///   equally likely.
#[derive(Clone, Debug)]
pub struct RequestGen {
    rng: SmallRng,
    region_start_bytes: u64,
    region_len_bytes: u64,
    /// Where offsets are drawn: the region, or with `zonemode=strided` one zone of it.
    span_bytes: u64,
    /// `zonemode=strided`: the zone the span is at, and when it moves on.
    zones: Option<ZoneWalk>,
    /// Random offsets are multiples of this (fio's `blockalign`).
    align_bytes: u64,
    /// The op of every request when the mode is not mixed.
    op_fixed: Direction,
    mixed: bool,
    /// A request is a read when a uniform draw in `0..100` is below this.
    read_percent: u64,
    split: bool,
    /// `len_index_by_percent[p]` is the index into `lens_bytes` for a uniform draw `p` in
    /// `0..100`; the percentages of `bssplit` become runs of equal entries.
    len_index_by_percent: [u8; PERCENT_SLOTS],
    lens_bytes: [u32; BSSPLIT_ENTRIES_MAX],
    /// Number of block-aligned positions in the region where a request of `lens_bytes[i]`
    /// fits; at least 1.
    slots_by_len: [u64; BSSPLIT_ENTRIES_MAX],
    /// `bsrange`: requests are `range_min_bytes` times `1..=range_steps` (0: not a range).
    range_steps: u64,
    range_min_bytes: u32,
    pattern: Pattern,
    /// `rw=randread:N`: a random jump every `run` requests (1: every request; 0: never).
    run: u64,
    /// Requests until the next jump (the first request jumps).
    run_left: u64,
    /// `rw_sequencer=identical`: requests between jumps repeat the previous offset.
    identical: bool,
    /// Start and end (region-relative) of each direction's previous request, for runs.
    last_start_bytes: [u64; 2],
    last_end_bytes: [u64; 2],
    /// `verify_backlog`: writes to read back (`backlog.rs`).
    backlog: Option<Box<VerifyBacklog>>,
}

#[derive(Clone, Debug)]
enum Pattern {
    /// Next offset of each direction, relative to the region start, indexed by `Direction as
    /// usize`, and fio's `rw=read:N` gap between one request's end and the next's start.
    Sequential {
        cursor_bytes: [u64; 2],
        gap_bytes: i64,
    },
    /// Offsets drawn independently (`norandommap`).
    Uniform,
    /// Each position once per pass, in a keyed order: requests of one position each.
    Shuffled(Shuffle),
    /// fio's random map: requests of several sizes.
    Mapped(RandomMap),
    /// fio's `zipf`, `pareto` and `normal`, draw for draw: a range index (of the smallest
    /// request length) times the alignment.
    Skewed(FioSkew),
    /// fio's `zoned` and `zoned_abs`: a block (of the alignment) of a zone.
    Zoned(ZoneTable),
    /// fio's `sequence`: the listed blocks in order, each direction counting its own requests
    /// (as fio's per-direction issue count does).
    Sequence(BlockSequence),
}

/// fio's strided zones: `size` bytes of requests in the zone at `start`, then the next one
/// `step` (`zonerange + zoneskip`) on, back at the region's start once a zone would not fit.
#[derive(Clone, Copy, Debug)]
struct ZoneWalk {
    size: u64,
    step: u64,
    range: u64,
    start: u64,
    done: u64,
}

impl ZoneWalk {
    /// The walk of `job`'s strided zones from the first, when `zonemode=strided`.
    fn of(job: &JobSpec) -> Option<ZoneWalk> {
        (job.zonemode == ZoneMode::Strided).then(|| ZoneWalk {
            size: job.zones.size_bytes,
            step: job.zones.range().saturating_add(job.zones.skip_bytes),
            range: job.zones.range(),
            start: 0,
            done: 0,
        })
    }
}

/// fio's `sequence` distribution: request `k` of a direction takes block `blocks[k % n]`, plus
/// `(k / n) x n` with `random_sequence_stride`. fio ends a striding job at the region's end;
/// nvarray starts its passes over from the first group.
#[derive(Clone, Debug)]
struct BlockSequence {
    blocks: Box<[u64]>,
    stride: bool,
    /// Blocks of the region (of the smallest request length).
    region_blocks: u64,
    issued: [u64; 2],
}

impl BlockSequence {
    #[inline]
    fn next_block(&mut self, op: Direction) -> u64 {
        let n = self.blocks.len() as u64;
        let k = self.issued[op as usize];
        self.issued[op as usize] += 1;
        let base = self.blocks[(k % n) as usize];
        // Blocks past the region are refused when the pattern is made.
        debug_assert!(base < self.region_blocks);
        if !self.stride {
            return base;
        }
        let groups = (self.region_blocks / n).max(1);
        let block = (k / n % groups) * n + base;
        if block < self.region_blocks {
            block
        } else {
            base
        }
    }
}

/// Draws a request's position may take before the generator settles for the last position
/// the request fits at (see `Pattern::Skewed`).
const FIT_DRAWS_MAX: u32 = 64;

/// The request lengths of a job, as the generator draws them: the lengths (one, a range's
/// least, or a split's entries), how many aligned positions each has in the region, and for a
/// split which entry each percent of the draws takes.
struct Lengths {
    lens_bytes: [u32; BSSPLIT_ENTRIES_MAX],
    slots_by_len: [u64; BSSPLIT_ENTRIES_MAX],
    len_index_by_percent: [u8; PERCENT_SLOTS],
    /// More than one length (a range or a split).
    split: bool,
    len_count: usize,
    range_steps: u64,
    range_min_bytes: u32,
}

impl Lengths {
    fn of(job: &JobSpec, region_len_bytes: u64, align_bytes: u64) -> Lengths {
        let mut lens_bytes = [0u32; BSSPLIT_ENTRIES_MAX];
        let mut slots_by_len = [0u64; BSSPLIT_ENTRIES_MAX];
        let mut len_index_by_percent = [0u8; PERCENT_SLOTS];
        let split = match &job.bs {
            BlockSize::Fixed(len_bytes) => {
                lens_bytes[0] = *len_bytes;
                false
            }
            BlockSize::Range { min, .. } => {
                lens_bytes[0] = *min;
                true
            }
            BlockSize::Split(entries) => {
                let mut percent_next = 0usize;
                for (index, &(len_bytes, percent)) in entries.iter().enumerate() {
                    lens_bytes[index] = len_bytes;
                    let percent_end = percent_next + percent as usize;
                    len_index_by_percent[percent_next..percent_end]
                        .fill(u8::try_from(index).expect("at most BSSPLIT_ENTRIES_MAX entries"));
                    percent_next = percent_end;
                }
                assert_eq!(percent_next, PERCENT_SLOTS);
                true
            }
        };
        let len_count = match &job.bs {
            BlockSize::Fixed(_) | BlockSize::Range { .. } => 1,
            BlockSize::Split(entries) => entries.len(),
        };
        let (range_steps, range_min_bytes) = match job.bs {
            BlockSize::Range { min, max } => (u64::from(max / min), min),
            _ => (0, 0),
        };
        // A range of no steps would read as no range at all (`range_steps` 0).
        assert!(
            !matches!(job.bs, BlockSize::Range { .. }) || range_steps >= 1,
            "bsrange {} has no lengths",
            job.bs
        );
        for index in 0..len_count {
            let len_bytes = u64::from(lens_bytes[index]);
            // region_bytes checked that every length is a block multiple inside the region.
            assert!(len_bytes <= region_len_bytes);
            slots_by_len[index] = (region_len_bytes - len_bytes) / align_bytes + 1;
        }

        Lengths {
            lens_bytes,
            slots_by_len,
            len_index_by_percent,
            split,
            len_count,
            range_steps,
            range_min_bytes,
        }
    }
}

impl Pattern {
    /// How thread `thread_index` of `job` chooses its offsets in a region of
    /// `region_len_bytes`: shuffled, mapped or free uniform positions, zipf ranks scattered
    /// over the region, or a sequential cursor.
    fn of(
        job: &JobSpec,
        thread_index: u32,
        region_len_bytes: u64,
        align_bytes: u64,
        lengths: &Lengths,
        block_bytes: u64,
    ) -> Result<Pattern, WorkloadError> {
        if !job.is_random() {
            return Ok(Pattern::sequential(
                job,
                thread_index,
                region_len_bytes,
                block_bytes,
            ));
        }
        Ok(match &job.random_distribution {
            Distribution::Uniform if job.norandommap => Pattern::Uniform,
            Distribution::Uniform
                if lengths.len_count == 1
                    && lengths.range_steps == 0
                    && u64::from(lengths.lens_bytes[0]) <= align_bytes =>
            {
                // Every request takes one position: a shuffle needs no map.
                let seed = stream_seed(job.randseed, &job.name, thread_index);
                Pattern::Shuffled(Shuffle::new(lengths.slots_by_len[0], splitmix64(seed)))
            }
            Distribution::Uniform => {
                let positions = region_len_bytes / align_bytes;
                if positions > RANDOM_MAP_POSITIONS_MAX {
                    return Err(WorkloadError::RandomMapTooLarge {
                        job: job.name.clone(),
                        positions,
                        positions_max: RANDOM_MAP_POSITIONS_MAX,
                    });
                }
                Pattern::Mapped(RandomMap::new(positions))
            }
            &Distribution::Zipf { theta, center } => {
                let (ranges, seed) = fio_skew_stream(job, thread_index, region_len_bytes);
                Pattern::Skewed(FioSkew::zipf(ranges, theta, center, seed))
            }
            &Distribution::Pareto { h, center } => {
                let (ranges, seed) = fio_skew_stream(job, thread_index, region_len_bytes);
                Pattern::Skewed(FioSkew::pareto(ranges, h, center, seed))
            }
            &Distribution::Normal {
                dev_percent,
                center,
            } => {
                let (ranges, seed) = fio_skew_stream(job, thread_index, region_len_bytes);
                Pattern::Skewed(FioSkew::normal(ranges, dev_percent, center, seed))
            }
            Distribution::Sequence(blocks) => Pattern::sequence(job, blocks, region_len_bytes)?,
            Distribution::Zoned(split) => Pattern::Zoned(
                ZoneTable::new(split, region_len_bytes / align_bytes, align_bytes).map_err(
                    |why| {
                        value_error(
                            "random_distribution",
                            &job.random_distribution.to_string(),
                            &format!("{why} (job {})", job.name),
                        )
                    },
                )?,
            ),
        })
    }

    /// fio's `random_distribution=sequence:B,...`: the listed blocks (of the smallest
    /// request length) in turn, each inside the region.
    fn sequence(
        job: &JobSpec,
        blocks: &[u32],
        region_len_bytes: u64,
    ) -> Result<Pattern, WorkloadError> {
        let len_min = u64::from(job.bs.lens_bytes().min().unwrap_or(1)).max(1);
        let region_blocks = region_len_bytes / len_min;
        // `region_bytes` checked that the region holds a request of every length.
        assert!(
            region_blocks >= 1,
            "job {}: a region of {region_len_bytes} bytes holds no request of {len_min}",
            job.name
        );
        if let Some(&b) = blocks.iter().find(|&&b| u64::from(b) >= region_blocks) {
            return Err(value_error(
                "random_distribution",
                &job.random_distribution.to_string(),
                &format!(
                    "block {b} is past the job's region of {region_blocks} blocks (job {})",
                    job.name
                ),
            ));
        }
        Ok(Pattern::Sequence(BlockSequence {
            blocks: blocks.iter().map(|&b| u64::from(b)).collect(),
            stride: job.random_sequence_stride,
            region_blocks,
            issued: [0; 2],
        }))
    }

    /// A sequential cursor for thread `thread_index`: with `offset_increment` each thread has
    /// a region of its own and starts at its beginning, as in fio; without, the threads
    /// start evenly spread over the one region, on block boundaries.
    fn sequential(
        job: &JobSpec,
        thread_index: u32,
        region_len_bytes: u64,
        block_bytes: u64,
    ) -> Pattern {
        let stride_bytes = if job.offset_increment_bytes > 0 {
            0
        } else {
            region_len_bytes / u64::from(job.numjobs)
        };
        let start_bytes = u64::from(thread_index) * stride_bytes / block_bytes * block_bytes;
        assert!(
            start_bytes < region_len_bytes.max(1),
            "thread {thread_index} starts at {start_bytes}, past its region of {region_len_bytes} bytes"
        );
        Pattern::Sequential {
            cursor_bytes: [start_bytes; 2],
            gap_bytes: job.rw_gap_bytes,
        }
    }
}

impl RequestGen {
    /// Builds the generator for thread `thread_index` (in `0..job.numjobs`) of `job` on a
    /// device of `device_size_bytes` with `block_size_bytes` blocks.
    ///
    /// Fails with the same errors as [`JobSpec::validate`] (less the transfer-size check,
    /// which needs the device's limit) and when `thread_index` is out of range.
    ///
    /// The random stream is seeded from `job.randseed`, `job.name` and `thread_index`, each
    /// stirred in with SplitMix64, so two jobs that differ only in name, or two threads of one
    /// job, issue different requests while identical inputs always issue identical ones.
    /// Workloads parsed from job files have unique job names.
    pub fn new(
        job: &JobSpec,
        thread_index: u32,
        device_size_bytes: u64,
        block_size_bytes: u32,
    ) -> Result<Self, WorkloadError> {
        let (region_start_bytes, region_len_bytes) =
            Self::checked_region(job, thread_index, device_size_bytes, block_size_bytes)?;
        let block_bytes = u64::from(block_size_bytes);
        // Random offsets fall on this boundary (fio's blockalign, by default the smallest
        // request length; region_bytes checked it is a block multiple inside the region).
        let align_bytes = job.align_bytes();
        assert!(
            align_bytes > 0,
            "job {}: offsets aligned to 0 bytes",
            job.name
        );
        let zones = ZoneWalk::of(job);
        let span_bytes = zones.map_or(region_len_bytes, |z| z.range);
        let lengths = Lengths::of(job, span_bytes, align_bytes);
        let pattern = Pattern::of(
            job,
            thread_index,
            span_bytes,
            align_bytes,
            &lengths,
            block_bytes,
        )?;

        let seed = stream_seed(job.randseed, &job.name, thread_index);
        Ok(RequestGen {
            rng: SmallRng::seed_from_u64(seed),
            region_start_bytes,
            region_len_bytes,
            span_bytes,
            zones,
            align_bytes,
            op_fixed: if job.rw.writes_only() {
                Direction::Write
            } else {
                Direction::Read
            },
            mixed: job.rw.is_mixed(),
            read_percent: u64::from(job.rwmixread),
            split: lengths.split,
            len_index_by_percent: lengths.len_index_by_percent,
            lens_bytes: lengths.lens_bytes,
            slots_by_len: lengths.slots_by_len,
            range_steps: lengths.range_steps,
            range_min_bytes: lengths.range_min_bytes,
            pattern,
            run: u64::from(job.rw_run),
            run_left: 1,
            identical: job.rw_sequencer == RwSequencer::Identical,
            last_start_bytes: [0; 2],
            last_end_bytes: [0; 2],
            backlog: job
                .verify_backlog
                .filter(|_| job.verify != crate::spec::Verify::None)
                .map(|n| Box::new(VerifyBacklog::new(n))),
        })
    }

    /// The job's region `(start, len)` in bytes, after the checks `new` promises: every
    /// field in range, the region on the device, the thread one of the job's, the strided
    /// zones inside the region.
    fn checked_region(
        job: &JobSpec,
        thread_index: u32,
        device_size_bytes: u64,
        block_size_bytes: u32,
    ) -> Result<(u64, u64), WorkloadError> {
        job.check_fields()?;
        let (region_start_bytes, region_len_bytes) =
            job.region_bytes(device_size_bytes, block_size_bytes)?;
        if thread_index >= job.numjobs {
            return Err(WorkloadError::ThreadIndex {
                thread_index,
                numjobs: job.numjobs,
            });
        }
        job.check_zones(region_len_bytes)?;
        Ok((region_start_bytes, region_len_bytes))
    }

    /// Start of the thread's region on the device, in bytes.
    pub fn region_start_bytes(&self) -> u64 {
        self.region_start_bytes
    }

    /// Length of the thread's region in bytes; every request lies inside
    /// `region_start_bytes .. region_start_bytes + region_len_bytes`.
    pub fn region_len_bytes(&self) -> u64 {
        self.region_len_bytes
    }

    /// The next request of this thread. Never allocates (but for a `verify_backlog`'s
    /// reads); never fails.
    #[inline]
    pub fn next_request(&mut self) -> Request {
        if self.backlog.is_none() {
            return self.generate();
        }
        self.next_with_backlog()
    }

    /// `next_request` with a `verify_backlog`: its reads first, when due.
    #[inline(never)]
    fn next_with_backlog(&mut self) -> Request {
        let backlog = self.backlog.as_mut().expect("checked");
        if let Some(read) = backlog.next_read() {
            return read;
        }
        let r = self.generate();
        self.backlog.as_mut().expect("checked").generated(r);
        r
    }

    /// A request of the job's pattern.
    #[inline(always)]
    fn generate(&mut self) -> Request {
        // One 64-bit draw feeds both per-request choices: the high half decides read or
        // write, the low half the length. Modes that need neither skip the draw.
        let bits = if self.mixed | self.split {
            self.rng.next_u64()
        } else {
            0
        };
        let op = if self.mixed {
            if percent_of(bits >> 32) < self.read_percent {
                Direction::Read
            } else {
                Direction::Write
            }
        } else {
            self.op_fixed
        };
        let (mut len_bytes, uniform_slots) = if self.range_steps == 0 {
            let len_index =
                usize::from(self.len_index_by_percent[percent_of(bits & 0xffff_ffff) as usize]);
            (self.lens_bytes[len_index], self.slots_by_len[len_index])
        } else {
            // The low half's 32 bits, moved up to pick one of the range's lengths.
            let step = below(bits << 32, self.range_steps) + 1;
            let len_bytes = self.range_min_bytes * step as u32;
            let slots = (self.span_bytes - u64::from(len_bytes)) / self.align_bytes + 1;
            (len_bytes, slots)
        };

        let offset_in_region_bytes = self.offset_in_span(op, &mut len_bytes, uniform_slots);
        debug_assert!(len_bytes > 0, "a request of no bytes");
        debug_assert!(offset_in_region_bytes + u64::from(len_bytes) <= self.span_bytes);
        if self.run != 1 {
            self.last_start_bytes[op as usize] = offset_in_region_bytes;
            self.last_end_bytes[op as usize] = offset_in_region_bytes + u64::from(len_bytes);
        }
        let offset_in_region_bytes = match &mut self.zones {
            None => offset_in_region_bytes,
            Some(zone) => {
                let at = zone.start + offset_in_region_bytes;
                zone.done += u64::from(len_bytes);
                if zone.done >= zone.size {
                    self.next_zone();
                }
                at
            }
        };
        debug_assert!(offset_in_region_bytes + u64::from(len_bytes) <= self.region_len_bytes);
        Request {
            op,
            offset_bytes: self.region_start_bytes + offset_in_region_bytes,
            len_bytes,
        }
    }
}

/// The offset of the first drawn index (times `align_bytes`) at or below `last`, the last
/// offset the request fits at. fio ends a job whose draw does not fit (a `bssplit` entry
/// longer than the smallest, near the region's end); nvarray draws again, and after
/// [`FIT_DRAWS_MAX`] draws settles for `last`.
#[inline]
fn fitting(last: u64, align_bytes: u64, mut draw: impl FnMut() -> u64) -> u64 {
    for _ in 0..FIT_DRAWS_MAX {
        let offset = draw() * align_bytes;
        if offset <= last {
            return offset;
        }
    }
    last
}

/// fio's range count and seed for thread `thread_index` of `job`'s skewed offsets: ranges of
/// the smallest request length over the region (rounded up), and the seed fio gives the
/// thread's file (`fio_rand::skew_seed`), whose default name is fio's `JOB.CLONE.0`.
fn fio_skew_stream(job: &JobSpec, thread_index: u32, region_len_bytes: u64) -> (u64, u64) {
    let len_min = u64::from(job.bs.lens_bytes().min().unwrap_or(1)).max(1);
    let ranges = region_len_bytes.div_ceil(len_min).max(1);
    let default_name;
    let file_name = match &job.filename {
        Some(name) => name.as_str(),
        None => {
            default_name = format!("{}.{thread_index}.0", job.name);
            &default_name
        }
    };
    let thread_number = u64::from(job.fio_thread_number) + u64::from(thread_index);
    (
        ranges,
        fio_rand::skew_seed(job.randseed, file_name, thread_number),
    )
}

impl RequestGen {
    /// Where in the span (the region, or a strided zone) the next request of `op` goes: a
    /// run's continuation, else the pattern's draw. A mapped draw may cut `len_bytes` short.
    #[inline]
    fn offset_in_span(&mut self, op: Direction, len_bytes: &mut u32, uniform_slots: u64) -> u64 {
        match (self.continuation(op, *len_bytes), &mut self.pattern) {
            (Some(offset), _) => offset,
            (
                None,
                Pattern::Sequential {
                    cursor_bytes,
                    gap_bytes,
                },
            ) => {
                let cursor = &mut cursor_bytes[op as usize];
                if *cursor + u64::from(*len_bytes) > self.span_bytes {
                    *cursor = 0;
                }
                let offset = *cursor;
                *cursor = after_gap(offset + u64::from(*len_bytes), *gap_bytes, self.span_bytes);
                offset
            }
            (None, Pattern::Uniform) => {
                let slot = below(self.rng.next_u64(), uniform_slots);
                slot * self.align_bytes
            }
            (None, Pattern::Shuffled(shuffle)) => {
                let rng = &mut self.rng;
                shuffle.next(|| rng.next_u64()) * self.align_bytes
            }
            (None, Pattern::Mapped(map)) => {
                let slot = map.land(below(self.rng.next_u64(), uniform_slots));
                let wanted = u64::from(*len_bytes).div_ceil(self.align_bytes);
                let taken = map.take(slot, wanted);
                if taken < wanted {
                    // Cut short where it would run into a position used in this pass (or the
                    // region's end), as fio's `mark_random_map` does.
                    *len_bytes = (taken * self.align_bytes) as u32;
                }
                slot * self.align_bytes
            }
            (None, Pattern::Skewed(skew)) => {
                let last = (uniform_slots - 1) * self.align_bytes;
                fitting(last, self.align_bytes, || skew.next_range())
            }
            (None, Pattern::Sequence(sequence)) => {
                let last = (uniform_slots - 1) * self.align_bytes;
                fitting(last, self.align_bytes, || sequence.next_block(op))
            }
            (None, Pattern::Zoned(table)) => {
                let last = (uniform_slots - 1) * self.align_bytes;
                let rng = &mut self.rng;
                fitting(last, self.align_bytes, || table.next_block(rng))
            }
        }
    }

    /// With `rw=randread:N`, the offset of a request that does not jump: where the previous
    /// request of its direction ended (or began, with `rw_sequencer=identical`), if the
    /// request fits there; `None` for a request that jumps (every N-th, counted over both
    /// directions as fio counts) or does not fit, and always without a run.
    #[inline]
    fn continuation(&mut self, op: Direction, len_bytes: u32) -> Option<u64> {
        if self.run == 1 {
            return None;
        }
        if self.run != 0 {
            self.run_left -= 1;
            if self.run_left == 0 {
                self.run_left = self.run;
                return None;
            }
        }
        let offset = if self.identical {
            self.last_start_bytes[op as usize]
        } else {
            self.last_end_bytes[op as usize]
        };
        (offset + u64::from(len_bytes) <= self.span_bytes).then_some(offset)
    }

    /// Moves a strided job to its next zone (fio's `setup_strided_zone_mode`): the span's
    /// sequential positions and random map start over there.
    #[cold]
    fn next_zone(&mut self) {
        let Some(zone) = &mut self.zones else {
            return;
        };
        zone.done = 0;
        zone.start = zone.start.saturating_add(zone.step);
        if zone.start.saturating_add(zone.range) > self.region_len_bytes {
            zone.start = 0;
        }
        debug_assert!(zone.start + zone.range <= self.region_len_bytes);
        self.last_start_bytes = [0; 2];
        self.last_end_bytes = [0; 2];
        match &mut self.pattern {
            Pattern::Sequential { cursor_bytes, .. } => *cursor_bytes = [0; 2],
            Pattern::Mapped(map) => map.clear(),
            _ => {}
        }
    }
}

/// Where a sequential request starts after one that ended at `end` (region-relative), `gap`
/// bytes on (fio's `rw=read:N`). Past either end of the region it wraps as fio's does: a
/// forward gap to the region's start, a backward one to `gap` before the region's end.
#[inline]
fn after_gap(end: u64, gap: i64, region_len: u64) -> u64 {
    if gap == 0 {
        return end;
    }
    match end.checked_add_signed(gap) {
        Some(next) if next < region_len => next,
        _ if gap > 0 => 0,
        _ => region_len.saturating_sub(gap.unsigned_abs()),
    }
}

/// Maps 32 random bits to `0..100` by multiply-shift; the bias, 100 / 2^32, is far below
/// anything a 3-point tolerance or a simulation could notice.
#[inline]
fn percent_of(bits32: u64) -> u64 {
    debug_assert!(bits32 >> 32 == 0, "{bits32:#x} is more than 32 bits");
    (bits32 * PERCENT_SLOTS as u64) >> 32
}

/// Maps 64 random bits to `0..n` by multiply-shift (Lemire); the bias is at most n / 2^64.
#[inline]
fn below(bits: u64, n: u64) -> u64 {
    ((u128::from(bits) * u128::from(n)) >> 64) as u64
}

/// SplitMix64's finalizer (Steele, Lea and Flood, OOPSLA 2014): a bijective 64-bit mix, so
/// distinct inputs stay distinct.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 64-bit FNV-1a of the job name; stable across platforms and Rust releases, unlike
/// `std`'s `DefaultHasher`.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn stream_seed(randseed: u64, name: &str, thread_index: u32) -> u64 {
    let seed = splitmix64(randseed);
    let seed = splitmix64(seed ^ fnv1a64(name.as_bytes()));
    splitmix64(seed ^ u64::from(thread_index))
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    const GIB: u64 = 1 << 30;

    fn job(pairs: &[(&str, &str)]) -> JobSpec {
        let mut job = JobSpec::default();
        for (key, value) in pairs {
            job.set(key, value).unwrap();
        }
        job
    }

    fn take(job: &JobSpec, thread_index: u32, device_size_bytes: u64, n: usize) -> Vec<Request> {
        let mut gen = RequestGen::new(job, thread_index, device_size_bytes, 4096).unwrap();
        (0..n).map(|_| gen.next_request()).collect()
    }

    /// `bsrange=4k-16k`: every request 4, 8, 12 or 16 KiB, each about a quarter of the time,
    /// inside the region and, for random offsets, on the smallest length's boundary; with
    /// sequential offsets each request starts where the one before ended.
    #[test]
    fn bsrange_draws_each_multiple_of_its_smallest_length_equally() {
        let n = 40_000;
        for rw in ["randrw", "write"] {
            // Without the random map, which cuts requests short late in a pass.
            let j = job(&[
                ("rw", rw),
                ("bsrange", "4k-16k"),
                ("size", "1m"),
                ("norandommap", "1"),
            ]);
            let requests = take(&j, 0, GIB, n);
            let mut counts: HashMap<u32, usize> = HashMap::new();
            for r in &requests {
                *counts.entry(r.len_bytes).or_default() += 1;
                assert!(r.offset_bytes + u64::from(r.len_bytes) <= 1 << 20, "{r:?}");
                assert_eq!(r.offset_bytes % 4096, 0, "{r:?}");
            }
            let mut lens: Vec<u32> = counts.keys().copied().collect();
            lens.sort_unstable();
            assert_eq!(lens, [4096, 8192, 12288, 16384], "{rw}");
            for (len, count) in &counts {
                let share = *count as f64 / n as f64;
                assert!((0.24..0.26).contains(&share), "{rw}: {len} drawn {share}");
            }
            if rw == "write" {
                for pair in requests.windows(2) {
                    let end = pair[0].offset_bytes + u64::from(pair[0].len_bytes);
                    assert!(pair[1].offset_bytes == end || pair[1].offset_bytes == 0);
                }
            }
        }
        // Equal ends are one length.
        assert_eq!(job(&[("bsrange", "8k-8k")]).bs, BlockSize::Fixed(8192));
    }

    #[test]
    fn sequential_is_contiguous_and_wraps() {
        // 16 blocks, 4k requests: the thread walks 0, 4k, ..., 60k, then 0 again.
        let job = job(&[("rw", "write"), ("size", "64k")]);
        let requests = take(&job, 0, GIB, 40);
        for (i, request) in requests.iter().enumerate() {
            assert_eq!(request.op, Direction::Write);
            assert_eq!(request.len_bytes, 4096);
            assert_eq!(request.offset_bytes, (i as u64 % 16) * 4096, "request {i}");
        }
    }

    #[test]
    fn sequential_wraps_before_running_past_the_region() {
        // 40k region, 16k requests: 0, 16k, then 32k+16k > 40k so back to 0.
        let job = job(&[("bs", "16k"), ("offset", "8k"), ("size", "40k")]);
        let offsets: Vec<u64> = take(&job, 0, GIB, 5)
            .iter()
            .map(|r| r.offset_bytes)
            .collect();
        let k = 1024;
        assert_eq!(offsets, [8 * k, 24 * k, 8 * k, 24 * k, 8 * k]);
    }

    #[test]
    fn sequential_threads_start_at_their_share_of_the_region() {
        let job = job(&[("numjobs", "4"), ("size", "1m"), ("offset", "1m")]);
        for thread_index in 0..4u32 {
            let requests = take(&job, thread_index, GIB, 3);
            let start = (1 << 20) + u64::from(thread_index) * (256 << 10);
            let offsets: Vec<u64> = requests.iter().map(|r| r.offset_bytes).collect();
            assert_eq!(
                offsets,
                [start, start + 4096, start + 8192],
                "thread {thread_index}"
            );
        }
    }

    #[test]
    fn sequential_mixed_keeps_one_position_per_direction() {
        let job = job(&[("rw", "rw"), ("bssplit", "4k/50:8k/50"), ("size", "1m")]);
        let requests = take(&job, 0, GIB, 2000);
        let mut next_bytes = HashMap::new();
        let mut wraps = 0;
        for request in &requests {
            let expected = next_bytes.entry(request.op).or_insert(0u64);
            if request.offset_bytes != *expected {
                // A wrap: the request did not fit before the region end.
                assert_eq!(request.offset_bytes, 0);
                assert!(*expected + u64::from(request.len_bytes) > 1 << 20);
                wraps += 1;
            }
            *expected = request.offset_bytes + u64::from(request.len_bytes);
        }
        assert!(wraps > 0, "2000 requests of about 6k must wrap a 1m region");
        let reads = requests.iter().filter(|r| r.op == Direction::Read).count();
        assert!((900..1100).contains(&reads), "{reads} reads of 2000");
    }

    #[test]
    fn same_inputs_same_stream_and_any_difference_changes_it() {
        let base = job(&[
            ("rw", "randrw"),
            ("bssplit", "4k/50:64k/50"),
            ("numjobs", "2"),
        ]);
        let reference = take(&base, 0, GIB, 1000);
        assert_eq!(take(&base, 0, GIB, 1000), reference);
        let renamed = JobSpec {
            name: "job1".into(),
            ..base.clone()
        };
        let reseeded = JobSpec {
            randseed: 1,
            ..base.clone()
        };
        assert_ne!(take(&renamed, 0, GIB, 1000), reference);
        assert_ne!(take(&reseeded, 0, GIB, 1000), reference);
        assert_ne!(take(&base, 1, GIB, 1000), reference);
    }

    /// Share of requests that hit the hottest 1% of distinct offsets of a 10k-block region.
    fn hottest_percent_share(distribution: &str) -> f64 {
        let job = job(&[
            ("rw", "randread"),
            ("size", &(10_000 * 4096).to_string()),
            ("random_distribution", distribution),
        ]);
        let requests = 500_000;
        let mut hits: HashMap<u64, u64> = HashMap::new();
        for request in take(&job, 0, GIB, requests) {
            *hits.entry(request.offset_bytes).or_default() += 1;
        }
        let mut counts: Vec<u64> = hits.into_values().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let hottest: u64 = counts.iter().take(100).sum();
        hottest as f64 / requests as f64
    }

    #[test]
    fn zipf_concentrates_on_few_blocks() {
        let share = hottest_percent_share("zipf:1.2");
        assert!(
            share > 0.30,
            "hottest 1% of blocks got {share:.3} of requests"
        );
    }

    /// fio aligns random offsets to `blockalign`, by default the block size ("Default: bs"),
    /// not to the device's sector: a random 4 KiB read never straddles a 4 KiB boundary
    /// (a RAID stripe, a flash page) unless asked to with `blockalign=512`.
    #[test]
    fn random_offsets_align_to_blockalign_which_defaults_to_the_smallest_size() {
        let aligned_to = |pairs: &[(&str, &str)]| {
            let mut g = RequestGen::new(&job(pairs), 0, 1 << 30, 512).unwrap();
            let offsets: Vec<u64> = (0..2000).map(|_| g.next_request().offset_bytes).collect();
            [65536u64, 16384, 4096, 1024, 512]
                .into_iter()
                .find(|a| offsets.iter().all(|o| o % a == 0))
        };
        assert_eq!(aligned_to(&[("rw", "randread"), ("bs", "4k")]), Some(4096));
        assert_eq!(
            aligned_to(&[("rw", "randread"), ("bs", "64k")]),
            Some(65536)
        );
        assert_eq!(
            aligned_to(&[("rw", "randrw"), ("bssplit", "4k/50:64k/50")]),
            Some(4096)
        );
        assert_eq!(
            aligned_to(&[("rw", "randread"), ("bs", "4k"), ("blockalign", "512")]),
            Some(512)
        );
        assert_eq!(
            aligned_to(&[("rw", "randread"), ("bs", "4k"), ("ba", "1k")]),
            Some(1024)
        );
        // An alignment the device cannot address is refused, naming the key.
        let bad = job(&[("rw", "randread"), ("blockalign", "100")]);
        let e = RequestGen::new(&bad, 0, 1 << 30, 512)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("blockalign"), "{e}");
        let mut j = JobSpec::default();
        assert!(j.set("blockalign", "0").is_err());
    }

    #[test]
    fn uniform_spreads_over_all_blocks() {
        let share = hottest_percent_share("random");
        assert!(
            share < 0.03,
            "hottest 1% of blocks got {share:.3} of requests"
        );
    }

    #[test]
    fn zipf_hot_set_is_not_at_the_region_start() {
        let job = job(&[("rw", "randread"), ("random_distribution", "zipf:2")]);
        let requests = take(&job, 0, GIB, 10_000);
        let first_mib = requests.iter().filter(|r| r.offset_bytes < 1 << 20).count();
        assert!(
            first_mib < 100,
            "{first_mib} of 10000 requests in the first MiB"
        );
    }

    #[test]
    fn zipf_extremes_stay_in_range() {
        for theta in ["0.0001", "0.999", "1.001", "100"] {
            let job = job(&[
                ("rw", "randrw"),
                ("random_distribution", &format!("zipf:{theta}")),
                ("bssplit", "4k/50:128k/50"),
                ("size", "1m"),
            ]);
            for request in take(&job, 0, GIB, 10_000) {
                assert!(request.offset_bytes + u64::from(request.len_bytes) <= 1 << 20);
                assert_eq!(request.offset_bytes % 4096, 0);
            }
        }
    }

    #[test]
    fn single_slot_region() {
        let job = job(&[
            ("rw", "randwrite"),
            ("bs", "8k"),
            ("size", "8k"),
            ("offset", "4k"),
        ]);
        for request in take(&job, 0, GIB, 100) {
            assert_eq!(
                request,
                Request {
                    op: Direction::Write,
                    offset_bytes: 4096,
                    len_bytes: 8192
                }
            );
        }
    }

    #[test]
    fn bssplit_lengths_follow_the_percentages() {
        let job = job(&[
            ("rw", "randread"),
            ("bssplit", "4k/10:8k/0:64k/90"),
            ("norandommap", "1"),
        ]);
        let requests = take(&job, 0, GIB, 20_000);
        let small = requests.iter().filter(|r| r.len_bytes == 4096).count();
        let large = requests.iter().filter(|r| r.len_bytes == 65536).count();
        assert_eq!(small + large, requests.len(), "8k has 0 percent");
        assert!((1_700..2_300).contains(&small), "{small} of 20000 are 4k");
    }

    /// fio's random map (on unless `norandommap`): `rw=randwrite bs=4k size=4m` writes each
    /// of the 1,024 blocks once in its first 1,024 requests, as fio 3.33 does (628 distinct
    /// blocks without the map), and the next 1,024 do it again (a new pass).
    #[test]
    fn random_offsets_use_each_block_once_per_pass() {
        for rw in ["randwrite", "randrw"] {
            let j = job(&[("rw", rw), ("bs", "4k"), ("size", "4m")]);
            let requests = take(&j, 0, GIB, 2048);
            for pass in requests.chunks(1024) {
                let blocks: HashSet<u64> = pass.iter().map(|r| r.offset_bytes / 4096).collect();
                assert_eq!(blocks.len(), 1024, "{rw}: every block once per pass");
                assert!(blocks.iter().all(|&b| b < 1024));
            }
            let free = job(&[
                ("rw", rw),
                ("bs", "4k"),
                ("size", "4m"),
                ("norandommap", "1"),
            ]);
            let drawn: HashSet<u64> = take(&free, 0, GIB, 1024)
                .iter()
                .map(|r| r.offset_bytes)
                .collect();
            assert!(
                (560..700).contains(&drawn.len()),
                "{rw} norandommap: {} distinct (about 1 - 1/e of 1,024)",
                drawn.len()
            );
        }
    }

    /// Mixed lengths with the map, as fio: requests never overlap within a pass (one that
    /// would run into a used block is cut short, in whole blocks), and a pass covers the
    /// region exactly, its bytes adding up to the region's size.
    #[test]
    fn mixed_lengths_with_the_random_map_cover_the_region_once_per_pass() {
        let j = job(&[
            ("rw", "randwrite"),
            ("bssplit", "4k/50:16k/50"),
            ("size", "4m"),
        ]);
        let mut gen = RequestGen::new(&j, 0, GIB, 4096).unwrap();
        for pass in 0..3 {
            let mut used = vec![false; 1024];
            let mut bytes = 0u64;
            while bytes < 4 << 20 {
                let r = gen.next_request();
                assert!(r.offset_bytes + u64::from(r.len_bytes) <= 4 << 20, "{r:?}");
                assert!(r.len_bytes > 0 && r.len_bytes.is_multiple_of(4096), "{r:?}");
                let first = r.offset_bytes / 4096;
                for b in first..first + u64::from(r.len_bytes) / 4096 {
                    assert!(!used[b as usize], "pass {pass}: block {b} twice ({r:?})");
                    used[b as usize] = true;
                }
                bytes += u64::from(r.len_bytes);
            }
            assert_eq!(bytes, 4 << 20, "pass {pass} moved exactly the region");
            assert!(used.iter().all(|&u| u));
        }
    }

    /// Each thread keeps a map of its own, as each fio thread does; zipf never uses one (fio
    /// turns the map off for non-uniform distributions), so hot blocks repeat.
    #[test]
    fn the_map_is_per_thread_and_uniform_only() {
        let j = job(&[("rw", "randread"), ("size", "1m"), ("numjobs", "2")]);
        for thread in 0..2 {
            let blocks: HashSet<u64> = take(&j, thread, GIB, 256)
                .iter()
                .map(|r| r.offset_bytes)
                .collect();
            assert_eq!(blocks.len(), 256, "thread {thread}");
        }
        let z = job(&[
            ("rw", "randread"),
            ("size", "1m"),
            ("random_distribution", "zipf:1.2"),
        ]);
        let blocks: HashSet<u64> = take(&z, 0, GIB, 256)
            .iter()
            .map(|r| r.offset_bytes)
            .collect();
        assert!(
            blocks.len() < 200,
            "zipf repeats its hot blocks: {}",
            blocks.len()
        );
    }

    /// One size on any device needs no map (a shuffle of its positions); several sizes keep
    /// one, and one that would be too large is refused, naming `norandommap`.
    #[test]
    fn only_a_job_of_several_sizes_on_a_huge_device_asks_for_norandommap() {
        let fixed = job(&[("rw", "randread"), ("bs", "512")]);
        let mut gen = RequestGen::new(&fixed, 0, 1 << 40, 512).unwrap();
        let first: HashSet<u64> = (0..10_000)
            .map(|_| gen.next_request().offset_bytes)
            .collect();
        assert_eq!(first.len(), 10_000, "a pass repeats nothing");
        let mixed = job(&[("rw", "randread"), ("bssplit", "512/50:4k/50")]);
        let err = RequestGen::new(&mixed, 0, 1 << 40, 512)
            .unwrap_err()
            .to_string();
        assert!(err.contains("norandommap=1"), "{err}");
        let free = job(&[
            ("rw", "randread"),
            ("bssplit", "512/50:4k/50"),
            ("norandommap", "1"),
        ]);
        assert!(RequestGen::new(&free, 0, 1 << 40, 512).is_ok());
    }

    #[test]
    fn new_rejects_bad_threads_and_geometry() {
        let job2 = job(&[("numjobs", "2")]);
        assert_eq!(
            RequestGen::new(&job2, 2, GIB, 4096)
                .unwrap_err()
                .to_string(),
            "thread_index: must be in 0..2 (numjobs), got 2"
        );
        assert_eq!(
            RequestGen::new(&job(&[("bs", "6k")]), 0, GIB, 4096)
                .unwrap_err()
                .to_string(),
            "bs: request length 6144 is not a nonzero multiple of the device block size 4096"
        );
        assert_eq!(
            RequestGen::new(&JobSpec::default(), 0, GIB, 0)
                .unwrap_err()
                .to_string(),
            "device: block size must be > 0"
        );
    }
}
