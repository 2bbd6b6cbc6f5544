//! Preconditioning in bulk against page by page: the fill is the same state exactly, and the
//! random part's line-level model gives the same write amplification, then and after.

use nvarray_ftl::{precondition, Ftl, FtlConfig, GcWork, Geometry, Precondition, VictimPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// 8 dies with `block`-page blocks over `logical` pages; `budget` bytes of maps (small: the
/// random part goes in bulk).
fn ftl_with(victim: VictimPolicy, block: u32, logical: u64, how: Precondition, budget: u64) -> Ftl {
    let cfg = FtlConfig {
        enabled: true,
        victim,
        precondition: how,
        map_budget_bytes: budget,
        ..FtlConfig::default()
    };
    let geometry = Geometry {
        dies: 8,
        pages_per_block: block,
        logical_pages: logical,
    };
    Ftl::new(&cfg, geometry).unwrap()
}

/// `ftl_with` 128-page blocks (1024-page lines).
fn ftl(victim: VictimPolicy, logical: u64, how: Precondition, budget: u64) -> Ftl {
    ftl_with(victim, 128, logical, how, budget)
}

const ROOMY: u64 = 1 << 30;
const TIGHT: u64 = 1 << 20;

/// `writes` uniform random writes (one in ten a trim) from `seed`; returns the dies written.
fn random_writes(f: &mut Ftl, writes: u64, seed: u64) -> Vec<u32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut work = GcWork::new(f.dies());
    let mut dies = Vec::new();
    for _ in 0..writes {
        let lpn = rng.gen_range(0..f.logical_pages());
        if rng.gen_ratio(1, 10) {
            f.trim(lpn);
        } else {
            f.look_up(lpn, true);
            dies.push(f.write(lpn, 0, &mut work));
            work.clear();
        }
    }
    dies
}

#[test]
fn a_fill_laid_down_at_once_is_the_fill_written_page_by_page() {
    for victim in VictimPolicy::ALL {
        // 2.5 lines' worth over a line multiple, and an exact multiple.
        for logical in [400_000u64, 400 * 1024] {
            let mut bulk = ftl(victim, logical, Precondition::Fill, ROOMY);
            precondition(&mut bulk, Precondition::Fill, 1, |_| {});
            let mut pages = ftl(victim, logical, Precondition::None, ROOMY);
            let mut work = GcWork::new(8);
            for lpn in 0..logical {
                pages.look_up(lpn, true);
                pages.write(lpn, 0, &mut work);
            }
            pages.reset_counters();
            assert_eq!(bulk.free_lines(), pages.free_lines());
            for lpn in (0..logical).step_by(997) {
                assert_eq!(bulk.read(lpn), pages.read(lpn), "page {lpn}");
            }
            // The same writes from here do the same things.
            let (a, b) = (
                random_writes(&mut bulk, 300_000, 3),
                random_writes(&mut pages, 300_000, 3),
            );
            assert!(
                a == b,
                "{victim:?} over {logical} pages: the writes went elsewhere"
            );
            assert_eq!(bulk.counters(), pages.counters(), "{victim:?}");
            assert_eq!(bulk.check_consistency(), Ok(()));
        }
    }
}

#[test]
fn a_random_precondition_in_bulk_amplifies_writes_as_page_by_page_does() {
    // 4 M pages (16 GiB) in 274 lines of 16384 pages, 7 % over-provisioning.
    let logical = 1 << 22;
    for victim in [
        VictimPolicy::Greedy,
        VictimPolicy::Fifo,
        VictimPolicy::DChoice,
        VictimPolicy::Random,
    ] {
        let how = Precondition::Random { drive_writes: 1.0 };
        let mut bulk = ftl_with(victim, 2048, logical, how, TIGHT);
        let b = precondition(&mut bulk, how, 1, |_| {});
        let mut pages = ftl_with(victim, 2048, logical, how, ROOMY);
        let p = precondition(&mut pages, how, 1, |_| {});
        assert!(b.in_bulk && !p.in_bulk);
        assert!(bulk.has_pooled_pages());
        let close = |x: f64, y: f64, tol: f64| (x - y).abs() <= tol * y;
        // The precondition's own figure.
        assert!(
            close(b.write_amplification, p.write_amplification, 0.01),
            "{victim:?}: the precondition's write amplification, {:.4} in bulk and {:.4} page by \
             page",
            b.write_amplification,
            p.write_amplification
        );
        // The bulk drive's maps hold nothing yet (the page-level one's hold every page).
        assert!(
            bulk.map_bytes() * 10 < pages.map_bytes(),
            "{} vs {}",
            bulk.map_bytes(),
            pages.map_bytes()
        );
        // The states it leaves: a tenth of a drive-write from each, then one more.
        for (writes, seed) in [(logical / 10, 9), (logical, 10)] {
            bulk.reset_counters();
            pages.reset_counters();
            random_writes(&mut bulk, writes, seed);
            random_writes(&mut pages, writes, seed);
            let (wb, wp) = (
                bulk.counters().write_amplification(),
                pages.counters().write_amplification(),
            );
            assert!(
                close(wb, wp, 0.01),
                "{victim:?}: {writes} writes then amplify {wb:.4} from bulk, {wp:.4} from pages"
            );
        }
        assert_eq!(bulk.check_consistency(), Ok(()), "{victim:?}");
    }
}

#[test]
fn pooled_pages_read_on_their_die_and_leave_the_pool_when_rewritten_or_trimmed() {
    let how = Precondition::Random { drive_writes: 0.5 };
    let mut f = ftl(VictimPolicy::Greedy, 1 << 18, how, TIGHT);
    assert!(precondition(&mut f, how, 1, |_| {}).in_bulk);
    for lpn in [0u64, 1, 7, 8, 12345] {
        assert_eq!(
            f.read(lpn),
            Some((lpn % 8) as u32),
            "a pooled page reads on its die"
        );
    }
    f.trim(12345);
    assert_eq!(f.read(12345), None);
    let mut work = GcWork::new(8);
    f.write(7, 0, &mut work);
    assert_eq!(f.check_consistency(), Ok(()));
    assert_eq!(f.counters().pages_trimmed, 1);
}

#[test]
fn cost_benefit_is_refused_in_bulk_with_the_budget_named() {
    let cfg = FtlConfig {
        enabled: true,
        victim: VictimPolicy::CostBenefit,
        precondition: Precondition::Random { drive_writes: 1.0 },
        map_budget_bytes: TIGHT,
        ..FtlConfig::default()
    };
    let geometry = Geometry {
        dies: 8,
        pages_per_block: 512,
        logical_pages: 1 << 20,
    };
    let e = Ftl::new(&cfg, geometry).unwrap_err().to_string();
    assert!(
        e.contains("cost-benefit") && e.contains("ftl.map_budget_bytes"),
        "{e}"
    );
}
