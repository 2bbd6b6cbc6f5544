//! The mapping-table cache changes what the map costs on the flash, never where pages go.

use nvarray_ftl::{Ftl, FtlConfig, GcWork, Geometry, VictimPolicy};
use proptest::prelude::*;

/// 4096 logical pages of 512 bytes (128 entries per translation page: 32 of them) on 2 dies,
/// with a cache of `cache_pages` translation pages (0: none).
fn ftl(victim: VictimPolicy, cache_pages: u64) -> Ftl {
    let cfg = FtlConfig {
        enabled: true,
        victim,
        page_bytes: 512,
        over_provisioning: 0.25,
        gc_background_free_lines: 2,
        map_cache_bytes: cache_pages * 512,
        ..FtlConfig::default()
    };
    let geometry = Geometry {
        dies: 2,
        pages_per_block: 16,
        logical_pages: 4096,
    };
    Ftl::new(&cfg, geometry).unwrap()
}

proptest! {
    #[test]
    fn the_cache_changes_the_maps_cost_not_where_pages_go(
        policy in 0usize..5,
        cache_pages in 1u64..40,
        ops in proptest::collection::vec((0u64..4096, any::<u8>()), 1..20000),
    ) {
        let victim = VictimPolicy::ALL[policy];
        let (mut plain, mut cached) = (ftl(victim, 0), ftl(victim, cache_pages));
        prop_assert_eq!(cached.map_cache_pages(), Some((cache_pages, 32)));
        let (mut w1, mut w2) = (GcWork::new(2), GcWork::new(2));
        let mut writes = 0;
        for (lpn, kind) in ops {
            // One op in eight a trim, one in four a read, the rest writes.
            match kind % 8 {
                0 => {
                    plain.trim(lpn);
                    cached.trim(lpn);
                }
                1 | 2 => {
                    prop_assert_eq!(plain.look_up(lpn, false), Default::default());
                    cached.look_up(lpn, false);
                    prop_assert_eq!(plain.read(lpn), cached.read(lpn));
                }
                _ => {
                    cached.look_up(lpn, true);
                    writes += 1;
                    let die = plain.write(lpn, 0, &mut w1);
                    prop_assert_eq!(die, cached.write(lpn, 0, &mut w2));
                    // The same collection, plus the map's pages on the cached one.
                    prop_assert_eq!(&w1.forced.erases, &w2.forced.erases);
                    prop_assert_eq!(&w1.background.erases, &w2.background.erases);
                    w1.clear();
                    w2.clear();
                }
            }
        }
        prop_assert_eq!(plain.check_consistency(), Ok(()));
        prop_assert_eq!(cached.check_consistency(), Ok(()));
        let (a, b) = (plain.counters(), cached.counters());
        prop_assert_eq!(a.map, Default::default());
        prop_assert_eq!(nvarray_ftl::FtlCounters { map: a.map, ..b }, a);
        let m = b.map;
        prop_assert!(m.hits <= m.lookups);
        prop_assert!(m.lookups >= writes);
        // Every translation page written back was changed first: by a host write (one per
        // write at most) or by the collector (one per page it copied at most).
        prop_assert!(m.pages_written <= writes + b.gc_pages_copied);
        prop_assert_eq!(
            b.flash_pages_programmed(),
            b.host_pages_written + b.gc_pages_copied + m.pages_written
        );
    }
}
