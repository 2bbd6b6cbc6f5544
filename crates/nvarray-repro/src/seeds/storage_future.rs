//! "The Future of Storage", the Moneta slides' first table: random 4 KB reads from user space
//! on a hard disk, a PCIe flash card and PCIe-attached NVM (`moneta-micro10-slides.md`).
//! Latency is one thread at queue depth 1; bandwidth 16 threads (Moneta's thread count).

use crate::spec::*;

/// The figure: the table's slide and the workload under it.
const FIGURE: &str =
    "moneta-micro10-slides.md, slide \"The Future of Storage\": \"Random 4KB Reads from user space\"";

/// One cell of the table.
fn cell(quote: &'static str) -> Source {
    moneta_slide("The Future of Storage", quote)
}

fn latency(preset: &str, sets: &[(&str, &str)], ios: &str) -> Experiment {
    sim(
        preset,
        sets,
        &[("rw", "randread"), ("bs", "4k"), ("number_ios", ios)],
    )
}

fn bandwidth(preset: &str, sets: &[(&str, &str)], runtime: &str) -> Experiment {
    sim(
        preset,
        sets,
        &[
            ("rw", "randread"),
            ("bs", "4k"),
            ("numjobs", "16"),
            ("runtime", runtime),
        ],
    )
}

/// PCIe-attached NVM: the `moneta` preset with the optimised stack's 5 us of software.
const NVM: [(&str, &str); 1] = [("host.software_ns", "5000")];

pub fn figures() -> Vec<Figure> {
    let row = |id: &str, what, unit, published: f64, text, experiment, measure, expect| {
        let id = format!("storage-future.{id}");
        let quote = (Some(published), text, cell(text));
        Row::one(id, what, unit, quote, experiment, measure, expect)
    };
    let ms = || of(|v| Some(mean_us(v)? / 1e3));
    let mb_per_s = || of(|v| Some(gb_per_s(v)? * 1e3));
    vec![Figure {
        id: "storage-future",
        seed: Seed::StorageFuture,
        title: "The Future of Storage: hard disk, PCIe flash and PCIe-NVM, random 4 KB reads from user space",
        source: FIGURE,
        rows: vec![
            row("hdd-latency", "hard drives (hdd), latency", "ms", 7.1, "Lat.: 7.1ms", latency("hdd", &[], "3000"), ms(), Expect::Within(0.10)),
            row("hdd-bandwidth", "hard drives (hdd), bandwidth", "MB/s", 2.6, "BW: 2.6MB/s", bandwidth("hdd", &[], "6s"), mb_per_s(), Expect::Differs {
                nvarray: 2.043,
                reason: "Four disks serving requests in arrival order give at most 4 / 7.2 ms x 4 KiB = 2.3 MB/s (2.0 with 16 threads' uneven queues). 2.6 MB/s needs command queueing that reorders requests to shorten seeks, which the disk model leaves out, or more disks than the four assumed (the slides give 4 TB, not the count).",
            }),
            row("flash-latency", "PCIe flash (pcie-flash-2010), latency", "us", 68.0, "68us", latency("pcie-flash-2010", &[], "2000"), of(mean_us), Expect::Within(0.10)),
            row("flash-bandwidth", "PCIe flash (pcie-flash-2010), bandwidth", "MB/s", 250.0, "250MB/s", bandwidth("pcie-flash-2010", &[], "50ms"), mb_per_s(), Expect::Within(0.10)),
            row("nvm-latency", "PCIe-NVM (moneta, 5 us of software), latency", "us", 12.0, "12us", latency("moneta", &NVM, "2000"), of(mean_us), Expect::Within(0.10)),
            row("nvm-bandwidth", "PCIe-NVM (moneta, 5 us of software), bandwidth", "MB/s", 1700.0, "1.7GB/s", bandwidth("moneta", &NVM, "10ms"), mb_per_s(), Expect::Differs {
                nvarray: 1521.7,
                reason: "Moneta's six transfer buffers (calibrated so that mixed 4 KiB traffic gives 541 K IOPS) each hold a 4 KiB read for its link transfer plus 3.5 us of set-up, media and ring: with every buffer busy the link to the host is 92 % used. The 1.7 GB/s of the slides is the link's plateau for large requests, which nvarray reaches (moneta-headline).",
            }),
        ],
        plot: Some(Plot::RowBars { y_label: "value (each row's unit)", log_y: true }),
    }]
}
