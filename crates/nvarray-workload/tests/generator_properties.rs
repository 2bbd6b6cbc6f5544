//! Properties of `RequestGen` over random valid jobs and devices.
//!
//! The reference model is plain arithmetic on the job: the region it describes, the lengths
//! it allows and the directions its mode allows. Failures print the job, the device and
//! proptest's seed, which together replay them.

use nvarray_workload::{BlockSize, Direction, Distribution, JobSpec, Request, RequestGen, RwMode};
use proptest::prelude::*;

/// A job that is valid on its device, with the geometry it was built for.
#[derive(Clone, Debug)]
struct Case {
    job: JobSpec,
    thread_index: u32,
    device_size_bytes: u64,
    block_size_bytes: u32,
}

const MODES: [RwMode; 6] = [
    RwMode::Read,
    RwMode::Write,
    RwMode::RandRead,
    RwMode::RandWrite,
    RwMode::Rw,
    RwMode::RandRw,
];

fn arb_case() -> impl Strategy<Value = Case> {
    (
        (
            0usize..6,
            0u8..=100,
            1u32..=8,
            any::<u64>(),
            any::<String>(),
        ),
        (
            prop_oneof![Just(512u32), Just(4096u32)],
            1u64..2_000_000,
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
        ),
        (
            prop::collection::vec((1u32..=64, 0u32..=100), 1..=5),
            prop::option::of(0.01f64..4.0),
            any::<u32>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (mode, rwmixread, numjobs, randseed, name_seed),
                (block_size_bytes, device_blocks, offset_raw, size_raw, whole_device),
                (len_blocks_and_weights, theta, thread_raw, norandommap),
            )| {
                let block_bytes = u64::from(block_size_bytes);
                // A device whose size is not a whole number of blocks exercises the rounding
                // of the region end.
                let device_size_bytes = device_blocks * block_bytes + offset_raw % block_bytes;
                let offset_blocks = offset_raw % device_blocks;
                let blocks_after_offset = device_blocks - offset_blocks;
                let region_blocks = if whole_device {
                    blocks_after_offset
                } else {
                    1 + size_raw % blocks_after_offset
                };
                // Lengths in blocks, clipped to the region so the job is valid.
                let lens_blocks: Vec<u64> = len_blocks_and_weights
                    .iter()
                    .map(|&(len_blocks, _)| u64::from(len_blocks).min(region_blocks))
                    .collect();
                let bs = if lens_blocks.len() == 1 {
                    BlockSize::Fixed(u32::try_from(lens_blocks[0] * block_bytes).unwrap())
                } else {
                    // Integer percentages that sum to 100: proportional to the weights, with
                    // the rounding remainder on the first entry.
                    let weights: Vec<u32> =
                        len_blocks_and_weights.iter().map(|&(_, w)| w + 1).collect();
                    let weight_sum: u32 = weights.iter().sum();
                    let mut percents: Vec<u32> =
                        weights.iter().map(|w| w * 100 / weight_sum).collect();
                    percents[0] += 100 - percents.iter().sum::<u32>();
                    BlockSize::Split(
                        lens_blocks
                            .iter()
                            .zip(percents)
                            .map(|(&len_blocks, percent)| {
                                (u32::try_from(len_blocks * block_bytes).unwrap(), percent)
                            })
                            .collect(),
                    )
                };
                let name: String = name_seed
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(20)
                    .collect();
                let job = JobSpec {
                    name: if name.is_empty() {
                        "job".to_string()
                    } else {
                        name
                    },
                    rw: MODES[mode],
                    bs,
                    rwmixread,
                    numjobs,
                    random_distribution: match theta {
                        Some(theta) => Distribution::Zipf {
                            theta,
                            center: None,
                        },
                        None => Distribution::Uniform,
                    },
                    randseed,
                    offset_bytes: offset_blocks * block_bytes,
                    size_bytes: (!whole_device).then_some(region_blocks * block_bytes),
                    norandommap,
                    ..JobSpec::default()
                };
                Case {
                    job,
                    thread_index: thread_raw % numjobs,
                    device_size_bytes,
                    block_size_bytes,
                }
            },
        )
}

fn generate(case: &Case, n: usize) -> Vec<Request> {
    let mut gen = RequestGen::new(
        &case.job,
        case.thread_index,
        case.device_size_bytes,
        case.block_size_bytes,
    )
    .expect("arb_case builds valid jobs");
    (0..n).map(|_| gen.next_request()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn requests_are_aligned_inside_the_region_with_allowed_lengths(case in arb_case()) {
        let job = &case.job;
        prop_assert_eq!(
            job.validate(case.device_size_bytes, case.block_size_bytes, u32::MAX),
            Ok(())
        );
        let block_bytes = u64::from(case.block_size_bytes);
        let region_start = job.offset_bytes;
        let region_end = match job.size_bytes {
            Some(size_bytes) => region_start + size_bytes,
            None => region_start + (case.device_size_bytes - region_start) / block_bytes * block_bytes,
        };
        let lens: Vec<u32> = job.bs.lens_bytes().collect();
        // fio's random map (uniform random offsets without norandommap) cuts a request
        // short, in whole aligned positions, where it would run into one used in this pass.
        let mapped = job.is_random()
            && job.random_distribution == Distribution::Uniform
            && !job.norandommap;
        let align = job.align_bytes();
        let len_max = lens.iter().copied().max().unwrap();
        for request in generate(&case, 2_000) {
            prop_assert_eq!(request.offset_bytes % block_bytes, 0, "{:?}", request);
            prop_assert_eq!(u64::from(request.len_bytes) % block_bytes, 0, "{:?}", request);
            prop_assert!(request.len_bytes > 0);
            let cut = mapped
                && u64::from(request.len_bytes).is_multiple_of(align)
                && request.len_bytes < len_max;
            prop_assert!(
                lens.contains(&request.len_bytes) || cut,
                "{:?} not in {:?}", request, lens
            );
            prop_assert!(request.offset_bytes >= region_start, "{:?}", request);
            let end = request.offset_bytes + u64::from(request.len_bytes);
            prop_assert!(end <= region_end, "{:?} ends past {}", request, region_end);
            prop_assert!(end <= case.device_size_bytes);
            match job.rw {
                RwMode::Read | RwMode::RandRead => prop_assert_eq!(request.op, Direction::Read),
                RwMode::Write | RwMode::RandWrite => prop_assert_eq!(request.op, Direction::Write),
                RwMode::Rw | RwMode::RandRw => {}
            }
        }
    }

    #[test]
    fn same_inputs_give_the_same_stream(case in arb_case()) {
        prop_assert_eq!(generate(&case, 1_000), generate(&case, 1_000));
    }

    #[test]
    fn sequential_requests_of_one_direction_are_contiguous_or_wrap(case in arb_case()) {
        prop_assume!(!case.job.is_random());
        let region_start = case.job.offset_bytes;
        let mut next_by_op = [None::<u64>; 2];
        for request in generate(&case, 2_000) {
            let next = &mut next_by_op[request.op as usize];
            if let Some(expected) = *next {
                prop_assert!(
                    request.offset_bytes == expected || request.offset_bytes == region_start,
                    "{:?} follows a request that ended at {}", request, expected
                );
            }
            *next = Some(request.offset_bytes + u64::from(request.len_bytes));
        }
    }
}

proptest! {
    // 20k requests per case: fewer cases keep the suite at a few seconds on 2 cores.
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn read_share_is_within_3_points_of_rwmixread(case in arb_case()) {
        let requests = generate(&case, 20_000);
        let reads = requests.iter().filter(|r| r.op == Direction::Read).count();
        let read_share = reads as f64 / requests.len() as f64;
        let expected = case.job.read_fraction();
        prop_assert!(
            (read_share - expected).abs() <= 0.03,
            "{} reads of {} for {} with rwmixread {}",
            reads, requests.len(), case.job.rw, case.job.rwmixread
        );
    }
}
