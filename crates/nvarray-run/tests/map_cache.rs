//! The mapping-table cache (`ftl.map_cache_bytes`) against its closed forms, through the
//! simulator: uniform random reads over a span of S translation pages with a cache of C hit
//! C/S of the time (LRU over an independent reference stream), and at queue depth 1 each miss
//! adds one page read to the media time.

mod common;

use common::one_job;
use nvarray_model::presets::preset;
use nvarray_model::{DeviceConfig, FtlStats};
use nvarray_report::RunReport;
use nvarray_run::sim;

/// The tlc preset with its FTL on and `settings`, or why it is refused.
fn tlc_with(settings: &[(&str, &str)]) -> Result<DeviceConfig, String> {
    let mut set = vec![("ftl.enabled".to_string(), "true".to_string())];
    set.extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    preset("tlc").unwrap().load(&set).map_err(|e| e.to_string())
}

/// A 16 GiB tlc drive, filled, with 1 MiB erase blocks (64 MiB lines, so the spare area holds
/// enough of them) and a map cache of `cache` (a size, `0` for none).
fn tlc(cache: &str) -> DeviceConfig {
    tlc_with(&[
        ("memory.capacity_bytes", "16g"),
        ("memory.erase_block_bytes", "1m"),
        ("ftl.precondition", "fill"),
        ("ftl.map_cache_bytes", cache),
    ])
    .unwrap()
}

fn random_reads(cache: &str, span: &str, iodepth: &str, ios: &str) -> RunReport {
    let w = one_job(&[
        ("rw", "randread"),
        ("size", span),
        ("iodepth", iodepth),
        ("number_ios", ios),
    ]);
    sim::run(&tlc(cache), &w).unwrap()
}

fn ftl(r: &RunReport) -> &FtlStats {
    r.ftl.as_ref().expect("an FTL's report")
}

fn media_ns(r: &RunReport) -> f64 {
    let b = &r.totals.breakdown_ns.0;
    b.iter()
        .find(|(k, _)| *k == "media")
        .expect("a media share")
        .1
}

#[test]
fn uniform_random_reads_hit_the_cache_c_over_s_of_the_time() {
    // 4 KiB pages hold 1024 entries, 4 MiB of logical space: a 4 GiB span is 1024
    // translation pages.
    for (cache, expected) in [("1m", 0.25), ("2m", 0.5), ("3m", 0.75)] {
        let r = random_reads(cache, "4g", "32", "100000");
        let m = ftl(&r).map_cache.as_ref().expect("the map cache's figures");
        assert_eq!((m.pages, m.map_pages), ((expected * 1024.0) as u64, 4096));
        assert_eq!(m.counters.lookups, 100_000);
        let hit = m.hit_ratio.unwrap();
        assert!(
            (hit - expected).abs() <= 0.02 * expected,
            "a {cache} cache over 1024 translation pages: expected a hit ratio of {expected} \
             within 2 %, found {hit}"
        );
        // A filled drive's translation pages are all in flash: every miss reads one.
        assert_eq!(m.counters.pages_read, m.counters.lookups - m.counters.hits);
        assert_eq!(m.counters.pages_written, 0, "reads change no entry");
    }
}

#[test]
fn each_miss_adds_one_page_read_to_the_media_time_at_queue_depth_one() {
    let off = random_reads("0", "4g", "1", "4000");
    assert!(ftl(&off).map_cache.is_none());
    let on = random_reads("2m", "4g", "1", "4000");
    let hit = ftl(&on).map_cache.as_ref().unwrap().hit_ratio.unwrap();
    // The data page and a missed translation page cost the same one-page read, one after
    // the other: media = t * (1 + miss ratio).
    let ratio = media_ns(&on) / media_ns(&off);
    assert!(
        (ratio - (2.0 - hit)).abs() < 0.005,
        "expected media time x{:.4} (2 - hit ratio {hit:.4}), found x{ratio:.4}",
        2.0 - hit
    );
}

#[test]
fn a_cache_holding_the_whole_map_costs_nothing_once_warm() {
    let off = random_reads("0", "16g", "8", "20000");
    let whole = random_reads("16m", "16g", "8", "20000");
    let m = ftl(&whole).map_cache.as_ref().unwrap();
    // The fill went through the cache, so it starts holding every translation page.
    assert_eq!((m.pages, m.counters.hits), (4096, 20_000));
    assert_eq!(off.totals.latency_ns, whole.totals.latency_ns);
}

#[test]
fn map_writes_count_in_the_write_amplification() {
    let w = one_job(&[
        ("rw", "randwrite"),
        ("iodepth", "32"),
        // 2.4 GB: past the spare area, so the collector runs.
        ("number_ios", "600000"),
    ]);
    let r = sim::run(&tlc("1m"), &w).unwrap();
    let f = ftl(&r);
    let m = f.map_cache.as_ref().unwrap();
    let c = &f.counters;
    assert!(
        m.counters.pages_written > 0 && c.gc_pages_copied > 0,
        "random writes over a small cache write translation pages back, and the filled drive \
         collects: {m:?}, {c:?}"
    );
    // The collector's moves changed translation pages the cache did not hold: read and
    // written once per victim, on top of the misses' reads.
    let misses = m.counters.lookups - m.counters.hits;
    assert!(m.counters.pages_read > misses, "{m:?}");
    assert_eq!(
        f.flash_pages_programmed,
        c.host_pages_written + c.gc_pages_copied + m.counters.pages_written
    );
    let wa = f.write_amplification.unwrap();
    let expected = f.flash_pages_programmed as f64 / c.host_pages_written as f64;
    assert!((wa - expected).abs() < 1e-12);
    // The same writes without a cache: the same data pages, no map pages.
    let off = sim::run(&tlc("0"), &w).unwrap();
    let c_off = &ftl(&off).counters;
    assert_eq!(c_off.host_pages_written, c.host_pages_written);
    assert!(ftl(&off).write_amplification.unwrap() < wa);
}

#[test]
fn a_cache_that_is_not_whole_translation_pages_is_refused_with_the_field_named() {
    let e = tlc_with(&[
        ("memory.capacity_bytes", "16g"),
        ("memory.erase_block_bytes", "1m"),
        ("ftl.map_cache_bytes", "6000"),
    ])
    .unwrap_err();
    assert!(
        e.contains("ftl.map_cache_bytes") && e.contains("6000"),
        "{e}"
    );
}

/// The tlc preset at `capacity`, preconditioned `random:1`, with `extra` settings.
fn large_tlc(capacity: &str, extra: &[(&str, &str)]) -> DeviceConfig {
    let mut set = vec![
        ("memory.capacity_bytes", capacity),
        ("ftl.precondition", "random:1"),
    ];
    set.extend_from_slice(extra);
    tlc_with(&set).unwrap()
}

#[test]
fn a_64_tib_drive_preconditions_in_bulk_and_its_maps_hold_what_the_run_wrote() {
    let cfg = large_tlc("64t", &[("ftl.map_cache_bytes", "64m")]);
    let w = one_job(&[("rw", "randrw"), ("iodepth", "16"), ("number_ios", "4000")]);
    let r = sim::run(&cfg, &w).unwrap();
    let f = ftl(&r);
    assert!(f.precondition_in_bulk);
    assert_eq!(f.logical_pages, 1 << 34);
    // Directories, per-line counts and the pool: about 102 MiB, nowhere near the 128 GiB a
    // full map of both directions would take.
    assert!(f.host_map_bytes < 256 << 20, "{}", f.host_map_bytes);
    let m = f.map_cache.as_ref().unwrap();
    // 16384 of 16 M translation pages: next to no hits on a random run.
    assert!(m.hit_ratio.unwrap() < 0.01);
    assert_eq!(f.counters.host_pages_written, r.totals.write_requests);
}

#[test]
fn a_run_whose_writes_outgrow_the_map_budget_stops_with_the_budget_named() {
    let w = one_job(&[
        ("rw", "randwrite"),
        ("iodepth", "32"),
        ("number_ios", "300000"),
    ]);
    let probe = one_job(&[("rw", "randread"), ("number_ios", "10")]);
    let base = ftl(&sim::run(&large_tlc("16t", &[]), &probe).unwrap()).host_map_bytes;
    // Half a MiB over what the drive takes before it is written: 300,000 scattered pages
    // need several.
    let budget = (base + (512 << 10)).to_string();
    let e = sim::run(&large_tlc("16t", &[("ftl.map_budget_bytes", &budget)]), &w)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ftl.map_budget_bytes") && e.contains(&budget),
        "{e}"
    );
}
