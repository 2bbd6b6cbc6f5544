//! The map stays consistent under any mix of writes and trims, for every victim policy and
//! placement handle count, and the FTL refuses geometries it cannot collect in.

use nvarray_ftl::{
    precondition, Ftl, FtlConfig, FtlError, GcWork, Geometry, Precondition, VictimPolicy,
};
use proptest::prelude::*;

fn small(victim: VictimPolicy, handles: u32) -> Ftl {
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
            pages_per_block: 2,
            logical_pages: 256,
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
