//! The map stays consistent under any mix of writes and trims, for every victim policy and
//! placement handle count, and the FTL refuses geometries it cannot collect in.

use nvarray_ftl::{
    precondition, Ftl, FtlConfig, FtlError, GcWork, Geometry, Precondition, VictimPolicy,
};
use proptest::prelude::*;

fn small(victim: VictimPolicy, handles: u32) -> Ftl {
    small_with_blocks(victim, handles, 2, 256)
}

/// `small` with blocks of `pages_per_block` pages and `logical_pages` pages.
fn small_with_blocks(
    victim: VictimPolicy,
    handles: u32,
    pages_per_block: u32,
    logical_pages: u64,
) -> Ftl {
    let cfg = FtlConfig {
        enabled: true,
        victim,
        over_provisioning: 0.5,
        placement_handles: handles,
        gc_background_free_lines: 1,
        ..FtlConfig::default()
    };
    Ftl::new(
        &cfg,
        Geometry {
            dies: 2,
            pages_per_block,
            logical_pages,
        },
    )
    .unwrap()
}

proptest! {
    #[test]
    fn writes_and_trims_keep_the_map_consistent(
        policy in 0usize..5,
        handles in 1u32..4,
        ops in proptest::collection::vec((0u64..256, 0u32..4, any::<bool>()), 1..3000),
    ) {
        let mut f = small(VictimPolicy::ALL[policy], handles);
        let mut work = GcWork::new(f.dies());
        let mut written = std::collections::BTreeSet::new();
        for (lpn, handle, trim) in ops {
            if trim {
                f.trim(lpn);
                written.remove(&lpn);
            } else {
                let die = f.write(lpn, handle, &mut work);
                prop_assert!(die < f.dies());
                written.insert(lpn);
            }
            work.clear();
        }
        prop_assert_eq!(f.check_consistency(), Ok(()));
        for lpn in 0..256 {
            prop_assert_eq!(f.read(lpn).is_some(), written.contains(&lpn), "page {}", lpn);
        }
        let c = f.counters();
        prop_assert_eq!(c.block_erases, c.gc_victims * u64::from(f.dies()));
    }
}

/// What a write's collection did on each die, whatever order the dies were first touched in.
fn per_die(work: &GcWork) -> [Vec<u32>; 6] {
    let (f, b) = (&work.forced, &work.background);
    [
        f.reads.clone(),
        f.programs.clone(),
        f.erases.clone(),
        b.reads.clone(),
        b.programs.clone(),
        b.erases.clone(),
    ]
}

proptest! {
    /// Deferred map moves (the default) give every result an immediate copy gives, whenever
    /// the deferred moves run: each write's die and collection work, each read's die, the
    /// counters, and the map once every move has run.
    #[test]
    fn deferred_map_moves_change_no_result(
        policy in 0usize..5,
        handles in 1u32..3,
        // Lines of 4 pages over 256, or of 16 over 1,024 filled, of which the writes touch a
        // quarter (so whole cold lines are collected, and several moves go into one line).
        large in any::<bool>(),
        ops in proptest::collection::vec((0u64..256, 0u32..3, 0u8..8), 1..3000),
    ) {
        let (blocks, logical) = if large { (8, 1024) } else { (2, 256) };
        let mut deferred = small_with_blocks(VictimPolicy::ALL[policy], handles, blocks, logical);
        if large {
            precondition(&mut deferred, Precondition::Fill, 1, |_| {});
        }
        let mut eager = deferred.clone();
        eager.set_deferred_moves(false);
        let (mut dw, mut ew) = (GcWork::new(2), GcWork::new(2));
        for (lpn, handle, kind) in ops {
            match kind {
                0 => {
                    deferred.trim(lpn);
                    eager.trim(lpn);
                }
                1 => prop_assert_eq!(deferred.read(lpn), eager.read(lpn), "read of {}", lpn),
                2 => {
                    deferred.run_deferred(handle + 1);
                }
                _ => {
                    let die = deferred.write(lpn, handle, &mut dw);
                    prop_assert_eq!(die, eager.write(lpn, handle, &mut ew), "write of {}", lpn);
                    prop_assert_eq!(per_die(&dw), per_die(&ew), "write of {}", lpn);
                    prop_assert_eq!(dw.forced.any, ew.forced.any);
                    prop_assert_eq!(dw.background.any, ew.background.any);
                    dw.clear();
                    ew.clear();
                }
            }
            prop_assert!(!eager.has_deferred());
        }
        prop_assert_eq!(deferred.counters(), eager.counters());
        prop_assert_eq!(deferred.free_lines(), eager.free_lines());
        prop_assert_eq!(deferred.erase_spread(), eager.erase_spread());
        prop_assert_eq!(deferred.check_consistency(), Ok(()));
        prop_assert!(!deferred.has_deferred(), "the check runs every move");
        for lpn in 0..logical {
            prop_assert_eq!(deferred.read(lpn), eager.read(lpn), "page {}", lpn);
        }
    }
}

/// A collection of a whole line with every page valid (FIFO's victim after a fill) books its flash work with the write that forced it, and leaves its map moves for later:
/// the write's cost does not grow with the line.
#[test]
fn a_whole_line_collection_defers_its_moves_and_books_its_work_at_once() {
    let cfg = FtlConfig {
        enabled: true,
        victim: VictimPolicy::Fifo,
        over_provisioning: 2.0,
        ..FtlConfig::default()
    };
    let geometry = Geometry {
        dies: 4,
        pages_per_block: 256,
        logical_pages: 8 * 1024,
    };
    let mut f = Ftl::new(&cfg, geometry).unwrap();
    precondition(&mut f, Precondition::Fill, 1, |_| {});
    let mut work = GcWork::new(f.dies());
    // Over the upper half only, so the oldest line (FIFO's victim) keeps every page valid.
    let mut written = 0u64;
    while !f.has_deferred() {
        assert!(written < 4 * 8 * 1024, "no deferred move in 4 drive-writes");
        work.clear();
        f.write(4 * 1024 + written % (4 * 1024), 0, &mut work);
        written += 1;
    }
    let copied = f.counters().gc_pages_copied;
    assert!(copied >= 1024, "a whole line's valid pages: {copied}");
    let booked = |w: &nvarray_ftl::DieWork| w.reads.iter().chain(&w.programs).sum::<u32>();
    assert_eq!(
        u64::from(booked(&work.forced) + booked(&work.background)),
        2 * copied,
        "a read and a program per page moved, booked before the moves ran"
    );
    // A slice at a time, as an emulator runs them between passes.
    let mut slices = 0;
    while f.run_deferred(64) {
        slices += 1;
    }
    assert!(
        slices >= 15,
        "{slices} slices of 64 pages for {copied} pages"
    );
    f.check_consistency().unwrap();
}

#[test]
fn collection_work_matches_the_counters() {
    let mut f = small(VictimPolicy::Greedy, 1);
    precondition(&mut f, Precondition::Fill, 1, |_| {});
    let mut work = GcWork::new(f.dies());
    let (mut reads, mut programs, mut erases) = (0u64, 0u64, 0u64);
    for i in 0..10_000u64 {
        f.write(i * 7919 % 256, 0, &mut work);
        for w in [&work.forced, &work.background] {
            reads += w.reads.iter().map(|&n| u64::from(n)).sum::<u64>();
            programs += w.programs.iter().map(|&n| u64::from(n)).sum::<u64>();
            erases += w.erases.iter().map(|&n| u64::from(n)).sum::<u64>();
        }
        work.clear();
    }
    let c = f.counters();
    assert!(
        c.gc_victims > 0,
        "no collection in 10,000 writes to a full device"
    );
    assert_eq!(reads, c.gc_pages_copied);
    assert_eq!(programs, c.gc_pages_copied);
    assert_eq!(erases, c.block_erases);
    let spread = f.erase_spread();
    assert!(spread.min <= spread.max && spread.max > 0, "{spread:?}");
}

#[test]
fn preconditioning_reaches_a_full_device_and_starts_the_counts_afresh() {
    let mut f = small(VictimPolicy::Greedy, 1);
    let done = precondition(&mut f, "random:2".parse().unwrap(), 1, |_| {});
    assert_eq!(done.pages_written, 3 * 256);
    assert!(done.write_amplification > 1.0, "{done:?}");
    assert_eq!(f.counters().host_pages_written, 0);
    assert!((0..256).all(|lpn| f.read(lpn).is_some()));
    f.check_consistency().unwrap();
}

#[test]
fn bad_preconditions_and_geometries_are_refused_with_the_field_named() {
    for bad in ["", "random", "random:x", "random:-1", "fil"] {
        let e = bad.parse::<Precondition>().unwrap_err();
        assert!(e.contains("random:"), "{bad}: {e}");
    }
    let geometry = Geometry {
        dies: 4,
        pages_per_block: 64,
        logical_pages: 1 << 14,
    };
    let tight = FtlConfig {
        over_provisioning: 0.01,
        ..FtlConfig::default()
    };
    let coarse = Geometry {
        dies: 64,
        pages_per_block: 4096,
        logical_pages: 16 << 20,
    };
    match Ftl::new(&FtlConfig::default(), coarse) {
        Err(e @ FtlError::TooCoarse { .. }) => {
            assert!(e.to_string().contains("memory.erase_block_bytes"), "{e}")
        }
        other => panic!("expected too coarse, found {:?}", other.err()),
    }
    match Ftl::new(&tight, geometry) {
        Err(e @ FtlError::TooFewSpareLines { .. }) => {
            assert!(e.to_string().contains("ftl.over_provisioning"), "{e}")
        }
        other => panic!("expected too few spare lines, found {:?}", other.err()),
    }
    let thresholds = FtlConfig {
        gc_forced_free_lines: 0,
        ..FtlConfig::default()
    };
    assert!(matches!(
        Ftl::new(&thresholds, geometry),
        Err(FtlError::Thresholds { .. })
    ));
    let negative = FtlConfig {
        over_provisioning: -0.5,
        ..FtlConfig::default()
    };
    assert!(matches!(
        Ftl::new(&negative, geometry),
        Err(FtlError::OverProvisioning(_))
    ));
}

/// Random victims over lines of 256 pages at random steady state, written 4 pages at a time:
/// several deferred moves fill one collector line, which random then picks as a victim. Every
/// move into it must run first (once only the last one ran, and the collection read a line
/// missing the first one's pages: "ran out of slots"). Two streams that did that before.
#[test]
fn every_move_into_a_line_runs_before_the_line_is_collected() {
    for seed in [1u64, 4] {
        let cfg = FtlConfig {
            enabled: true,
            victim: VictimPolicy::Random,
            ..FtlConfig::default()
        };
        let geometry = Geometry {
            dies: 64,
            pages_per_block: 4,
            logical_pages: 65_536,
        };
        let mut deferred = Ftl::new(&cfg, geometry).unwrap();
        precondition(&mut deferred, "random:1".parse().unwrap(), 1, |_| {});
        let mut eager = deferred.clone();
        eager.set_deferred_moves(false);
        let mut work = GcWork::new(64);
        let mut x = 12_345 + seed * 7_919;
        for _ in 0..30_000 {
            // xorshift64: the stream that found it.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let first = x % (65_536 / 4) * 4;
            for lpn in first..first + 4 {
                deferred.write(lpn, 0, &mut work);
                eager.write(lpn, 0, &mut work);
                work.clear();
            }
        }
        assert_eq!(deferred.counters(), eager.counters(), "seed {seed}");
        deferred.check_consistency().unwrap();
        assert!((0..65_536).all(|lpn| deferred.read(lpn) == eager.read(lpn)));
    }
}
