//! vNVML (2019 slides): `vnvml-2019-slides.txt`. The NVM library's benchmarks
//! (`nvarray pm-bench`) on this machine, and PMDK's side of the page microbenchmark.

use serde_json::Value;

use crate::spec::*;

/// A YCSB run of 64 KiB records (the seed's record size; 2,000 records fit this machine's
/// time budget), half writes.
fn ycsb(log: &str, cache: &str) -> Experiment {
    nvarray(&[
        "pm-bench",
        "ycsb",
        "--record-bytes",
        "64k",
        "--records",
        "2000",
        "--ops",
        "10000",
        "--write-pct",
        "50",
        "--log-size",
        log,
        "--cache-size",
        cache,
    ])
}

fn normalised(v: &Value) -> Option<f64> {
    at(v, "normalised")
}

/// vNVML's page microbenchmark: N bytes into each 4 KiB page of an array, once over. The
/// paper's array is 2 GB; 256 MiB keeps `nvarray repro all` within its time budget.
fn pages(write_bytes: &str) -> Experiment {
    nvarray(&[
        "pm-bench",
        "pages",
        "--array-bytes",
        "256m",
        "--write-bytes",
        write_bytes,
        "--passes",
        "1",
    ])
}

fn pmdk_pages(write_bytes: &str) -> Experiment {
    Experiment::PmdkPeer {
        args: [
            "pages",
            "--pool",
            "/dev/shm/nvarray-repro-pmdk.pool",
            "--array-bytes",
            "256m",
            "--write-bytes",
            write_bytes,
            "--passes",
            "1",
        ]
        .map(String::from)
        .to_vec(),
    }
}

pub fn figures() -> Vec<Figure> {
    let time_ratio = |n: &'static str| {
        Row {
        id: format!("vnvml-pages.{n}-bytes"),
        what: format!("{n} B into every page of 256 MiB, nvarray-pm time / PMDK time"),
        unit: "x",
        published: 1.0,
        published_text: "compared in a chart, no number in the text",
        source: "slides: \"We allocate a 2GB array in NVM, and write certain amount of data to each 4K page ... vNVML, PMDK, and SoftWrAP\"",
        experiments: vec![pages(n), pmdk_pages(n)],
        measure: ratio(|v| at(v, "seconds")),
        expect: Expect::Measured,
        note: Some("Below 1, nvarray-pm is faster. Full-size figures, 1 and 16 passes, and all sizes: `sudo ./scripts/perf_pm.py --only pages`, docs/perf.md."),
    }
    };
    vec![
        Figure {
            id: "vnvml-log-size",
            seed: Seed::Vnvml,
            title: "vNVML: throughput against the redo log's size",
            source: "slides: \"... not change a lot (less than 10%) when we shrink the size of log buffer from 2GB to 128MB\"",
            rows: vec![Row {
                id: "vnvml-log-size.128m-vs-2g".into(),
                what: "YCSB 64 KiB records, 50 % writes: throughput with a 128 MiB log / with 2 GiB".into(),
                unit: "x",
                published: 1.0,
                published_text: "within 10 %",
                source: "slides, the log-size figures (\"Log: 2G ... Log: 128M\")",
                experiments: vec![ycsb("128m", "256m"), ycsb("2g", "256m")],
                measure: ratio(normalised),
                expect: Expect::AtLeast(0.9),
                note: Some("Each side is normalised to unlogged writes measured in the same run, so the machine's drift cancels."),
            }],
            plot: Some(Plot::RowBars { y_label: "ratio", log_y: false }),
        },
        Figure {
            id: "vnvml-cache",
            seed: Seed::Vnvml,
            title: "vNVML: throughput when the write cache absorbs the writes",
            source: "slides: YCSB on MongoDB, cache sizes 1 to 8 GB, normalised to the baseline",
            rows: vec![Row {
                id: "vnvml-cache.absorbed".into(),
                what: "YCSB 64 KiB records, 50 % writes, data set in the 256 MiB cache: throughput / unlogged writes".into(),
                unit: "x",
                published: 0.9,
                published_text: "over 90 % of the baseline",
                source: "slides, the cache-size figures",
                experiments: vec![ycsb("64m", "256m")],
                measure: of(normalised),
                expect: Expect::AtLeast(0.9),
                note: Some("The seed's baseline was MongoDB with journaling off, whose own per-operation cost hides the library's; nvarray's baseline is a bare memcpy into a mapping, so every logged write shows its full price (docs/perf.md, \"YCSB-style key-value workload\")."),
            }],
            plot: None,
        },
        Figure {
            id: "vnvml-pages",
            seed: Seed::Vnvml,
            title: "vNVML's page microbenchmark against PMDK",
            source: "slides: \"Write 2GB NVM array once\" (the page-write comparison of vNVML, PMDK and SoftWrAP)",
            rows: vec![time_ratio("64"), time_ratio("4096")],
            plot: Some(Plot::RowBars { y_label: "time ratio", log_y: false }),
        },
    ]
}
