//! Flexible Data Placement (issue 41): two reclaim unit handles keeping hot and cold data
//! apart. Each stream here overwrites its own region in order (a log, a cache's segments), 80 %
//! of the writes to the hot 20 % of the space: mixed in the same lines, every line holds cold
//! pages long after its hot ones died, and the collector copies them; kept apart, every line
//! dies whole and nothing is copied.

use nvarray_ftl::{precondition, Ftl, FtlConfig, GcWork, Geometry, Precondition, VictimPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const LOGICAL: u64 = 1 << 18;

fn ftl(handles: u32) -> Ftl {
    let cfg = FtlConfig {
        enabled: true,
        victim: VictimPolicy::Greedy,
        over_provisioning: 0.10,
        placement_handles: handles,
        ..FtlConfig::default()
    };
    let geometry = Geometry {
        dies: 4,
        pages_per_block: 16,
        logical_pages: LOGICAL,
    };
    Ftl::new(&cfg, geometry).unwrap()
}

/// Write amplification over 5 drive-writes (after 2 of warm-up) of two sequential streams,
/// hot (80 % of the writes, the first 20 % of the space) and cold; `separate` sends them
/// through handles 0 and 1, else both through 0.
fn two_streams(separate: bool) -> f64 {
    let mut f = ftl(if separate { 2 } else { 1 });
    precondition(&mut f, Precondition::Fill, 1, |_| {});
    let hot = LOGICAL / 5;
    let (mut hot_next, mut cold_next) = (0, hot);
    let mut rng = SmallRng::seed_from_u64(9);
    let mut work = GcWork::new(f.dies());
    let mut write = |f: &mut Ftl| {
        let (lpn, handle) = if rng.gen_bool(0.8) {
            hot_next = (hot_next + 1) % hot;
            (hot_next, 0)
        } else {
            cold_next = if cold_next + 1 == LOGICAL {
                hot
            } else {
                cold_next + 1
            };
            (cold_next, 1)
        };
        f.write(lpn, if separate { handle } else { 0 }, &mut work);
        work.clear();
    };
    for _ in 0..2 * LOGICAL {
        write(&mut f);
    }
    f.reset_counters();
    for _ in 0..5 * LOGICAL {
        write(&mut f);
    }
    f.check_consistency().unwrap();
    f.counters().write_amplification()
}

#[test]
fn separating_hot_and_cold_streams_brings_write_amplification_to_one() {
    let mixed = two_streams(false);
    let separated = two_streams(true);
    println!("write amplification: mixed {mixed:.4}, separated {separated:.4}");
    assert!(
        (separated - 1.0).abs() <= 0.05,
        "hot and cold on their own handles: write amplification {separated:.4}, expected \
         within 5 % of 1"
    );
    assert!(
        mixed > 1.1,
        "hot and cold mixed: write amplification {mixed:.4}, expected the cold pages' copies \
         to show (above 1.1)"
    );
}
