//! DC Express (Vucinic, HGST, SNIA 2016): `hgst-dcexpress-2016-slides.md`. Device rows run on
//! the `dc-express-gen2x4` and `dc-express-gen3x8` presets in the simulator; the packet counts
//! come from the model's link counters; user space against the kernel is measured on this
//! machine (the emulator, and fio on a loop device).

use serde_json::Value;

use crate::spec::*;

const GEN2: &str = "dc-express-gen2x4";
const GEN3: &str = "dc-express-gen3x8";
const SIZES: [&str; 8] = ["32", "64", "128", "256", "512", "1k", "2k", "4k"];

pub fn figures() -> Vec<Figure> {
    vec![
        iops_by_size(),
        qd1_latency(),
        packets_figure(),
        user_vs_kernel(),
        remote_figure(),
    ]
}

/// The title of the two slides on remote PCM.
const REMOTE: &str = "Remote PCM has performance similar to remote DRAM";

/// The title of the slide on the bare protocol at gen3 x8.
const BARE_GEN3: &str = "DC express bare protocol performance at gen3x8";

/// Remote PCM against remote DRAM over RDMA (the `remote-pcm` and `remote-dram` presets: the
/// same DC Express device and network, PCM or DRAM behind it).
fn remote_figure() -> Figure {
    // Raw access: one 512 B read at a time.
    let raw = |preset: &str| {
        sim(
            preset,
            &[],
            &[("rw", "randread"), ("bs", "512"), ("number_ios", "2000")],
        )
    };
    // A key-value get: an index entry (64 B) and a value (512 B) read one after the other, with
    // the store's software on the host before each (`host.software_ns`, calibrated; see the
    // presets). At queue depth 1 a get takes two requests' mean latency, so the ratio of the
    // requests' means is the ratio of the gets'.
    let kvs = |preset: &str| {
        sim(
            preset,
            &[("host.software_ns", "2750")],
            &[
                ("rw", "randread"),
                ("bssplit", "64/50:512/50"),
                ("number_ios", "4000"),
            ],
        )
    };
    Figure {
        id: "dcexpress-remote",
        seed: Seed::DcExpress,
        title: "DC Express scale-out: remote PCM against remote DRAM over RDMA",
        source: "slides, \"Remote PCM has performance similar to remote DRAM\" (presets remote-pcm and remote-dram: the fabric stage, RDMA over FDR InfiniBand)",
        rows: vec![
            Row {
                id: "dcexpress-remote.raw".into(),
                what: "raw 512 B RDMA read at QD 1, remote PCM latency / remote DRAM".into(),
                unit: "x",
                published: Some(1.26),
                published_text: "26% slower",
                source: dcexpress_slide(REMOTE, "Raw RDMA access to remote PCM via PCIe peer2peer is 26% slower than to DRAM"),
                experiments: vec![raw("remote-pcm"), raw("remote-dram")],
                measure: ratio(mean_us),
                expect: Expect::Within(0.02),
                note: Some("Calibrated: remote-pcm's read latency (880 ns) was set for this ratio behind the modelled network (1.9 us of the 3.1 us remote DRAM read)."),
            },
            Row {
                id: "dcexpress-remote.kvs".into(),
                what: "key-value get (64 B index + 512 B value reads, 2.75 us software each), remote PCM / remote DRAM".into(),
                unit: "x",
                published: Some(1.14),
                published_text: "only 14%",
                source: dcexpress_slide(REMOTE, "This gets effectively hidden in other system latency: KVS latency impact is only 14%"),
                experiments: vec![kvs("remote-pcm"), kvs("remote-dram")],
                measure: ratio(mean_us),
                expect: Expect::Within(0.02),
                note: Some("Calibrated: the store's software time per request (2.75 us) was set for this ratio; the slides give neither the store nor its latency. What the model shows is the mechanism: the same 0.8 us the PCM adds is a smaller share of a longer operation."),
            },
        ],
        plot: Some(Plot::RowBars {
            y_label: "remote PCM / remote DRAM latency",
            log_y: false,
        }),
    }
}

fn loaded(preset: &str, bs: &str) -> Experiment {
    sim(
        preset,
        &[],
        &[
            ("rw", "randread"),
            ("bs", bs),
            ("numjobs", "8"),
            ("iodepth", "16"),
            ("runtime", "1ms"),
        ],
    )
}

fn qd1(preset: &str, bs: &str) -> Experiment {
    sim(
        preset,
        &[],
        &[("rw", "randread"), ("bs", bs), ("number_ios", "2000")],
    )
}

fn size_bytes(bs: &str) -> f64 {
    nvarray_workload::parse_size(bs).expect("a size") as f64
}

/// One curve per preset over `SIZES`: `run(preset, size)` measured by `measure`.
fn by_size(
    run: fn(&str, &str) -> Experiment,
    measure: fn(&Value) -> Option<f64>,
) -> Vec<LineSeries> {
    [GEN2, GEN3]
        .into_iter()
        .map(|preset| LineSeries {
            label: preset.to_string(),
            points: SIZES
                .iter()
                .map(|bs| PlotPoint {
                    x: size_bytes(bs),
                    experiment: run(preset, bs),
                    measure: of(measure),
                })
                .collect(),
        })
        .collect()
}

fn million_iops(v: &Value) -> Option<f64> {
    Some(iops(v)? / 1e6)
}

fn iops_by_size() -> Figure {
    let series = by_size(loaded, million_iops);
    Figure {
        id: "dcexpress-iops-by-size",
        seed: Seed::DcExpress,
        title: "DC Express bare protocol: random reads from SRAM, IOPS against transfer size",
        source: "slides, \"DC express bare protocol performance at gen3x8\" and \"Blast from the past: DC express at gen2x4\" (the slides give no thread count or queue depth: nvarray's is 8 threads at QD 16)",
        rows: vec![Row {
            id: "dcexpress-iops-by-size.gen3x8-64b".into(),
            what: "gen3 x8, 64 B random reads".into(),
            unit: "M IOPS",
            published: Some(20.0),
            published_text: "over 20 M IOPS",
            source: dcexpress_slide(BARE_GEN3, "Max bandwidth much higher, over 20 MIOPS on some systems for <128 B transfers"),
            experiments: vec![loaded(GEN3, "64")],
            measure: of(million_iops),
            expect: Expect::AtLeast(20.0),
            note: Some("Below 128 B the protocol engine (10 cycles a command at 250 MHz) is the limit; above, the link."),
        }],
        plot: Some(Plot::Lines {
            x_label: "transfer size (bytes)",
            y_label: "M IOPS",
            log_x: true,
            log_y: true,
            series,
            published: vec![(64.0, 20.0)],
        }),
    }
}

fn qd1_latency() -> Figure {
    let series = by_size(qd1, mean_us);
    Figure {
        id: "dcexpress-qd1",
        seed: Seed::DcExpress,
        title: "DC Express: read latency at queue depth 1, gen2 x4 against gen3 x8",
        source: "slides, \"DC express bare protocol performance at gen3x8\"",
        rows: vec![
            Row {
                id: "dcexpress-qd1.gen3-vs-gen2".into(),
                what: "64 B read at QD 1, gen3 x8 latency / gen2 x4".into(),
                unit: "x",
                published: Some(1.0),
                published_text: "no significant improvement",
                source: dcexpress_slide(BARE_GEN3, "At QD=1 no significant latency improvement over gen2x4, PCIe is limiting"),
                experiments: vec![qd1(GEN3, "64"), qd1(GEN2, "64")],
                measure: ratio(mean_us),
                expect: Expect::AtLeast(0.9),
                note: Some("Both are two one-way trips through the link and root complex (2 x 500 ns) plus a few tens of ns on the device; the wider, faster link only shortens the transfer."),
            },
            Row {
                id: "dcexpress-qd1.gen2-512b".into(),
                what: "512 B read at QD 1, gen2 x4".into(),
                unit: "us",
                published: Some(1.43),
                published_text: "over 700 K IOPS at QD 1",
                source: Source::Outside {
                    reference: "Vucinic et al., FAST'14, abstract: \"exceed 700,000 IOPS on small random reads at queue depth 1\" (1/700 K = 1.43 us)",
                },
                experiments: vec![qd1(GEN2, "512")],
                measure: of(mean_us),
                expect: Expect::Within(0.10),
                note: None,
            },
        ],
        plot: Some(Plot::Lines {
            x_label: "transfer size (bytes)",
            y_label: "latency (us)",
            log_x: true,
            log_y: false,
            series,
            published: vec![(512.0, 1.43)],
        }),
    }
}

/// The row of `nvarray presets show NAME --protocol-cost --json` for one command.
fn traffic_row<'v>(v: &'v Value, protocol: &str, op: &str, len: u64) -> Option<&'v Value> {
    v.as_array()?.iter().find(|r| {
        r.get("protocol").and_then(Value::as_str) == Some(protocol)
            && r.get("op").and_then(Value::as_str) == Some(op)
            && r.get("len_bytes").and_then(Value::as_u64) == Some(len)
    })
}

/// Packets of one kind (`data` or `protocol`), both directions.
fn packets(row: &Value, carries: &str) -> f64 {
    ["to_device", "to_host"]
        .iter()
        .filter_map(|d| at(row, &format!("{d}.{carries}.packets")))
        .sum()
}

fn packets_of(v: &Value, protocol: &str, op: &str, len: u64) -> Option<f64> {
    let row = traffic_row(v, protocol, op, len)?;
    Some(packets(row, "data") + packets(row, "protocol"))
}

fn packets_figure() -> Figure {
    let cost = || Experiment::ProtocolCost {
        preset: GEN3.to_string(),
    };
    let fewer = |op: &'static str, len: u64| Row {
        id: format!("dcexpress-packets.{op}-{len}"),
        what: format!("packets per {len} B {op}, DC Express / NVMe"),
        unit: "x",
        published: None,
        published_text: "fewer",
        source: dcexpress_slide(
            "Blast from the past: DC express at gen2x4",
            "new, leaner PCIe storage protocol - minimizes number of packets per command",
        ),
        experiments: vec![cost()],
        measure: Box::new(move |o: &[&Value]| {
            let v = o.first()?;
            Some(packets_of(v, "dc-express", op, len)? / packets_of(v, "nvme", op, len)?)
        }),
        expect: Expect::AtMost(0.99),
        note: None,
    };
    let bars = ["moneta", "nvme", "dc-express"]
        .into_iter()
        .flat_map(|protocol| {
            [
                ("read", 512u64),
                ("read", 4096),
                ("write", 512),
                ("write", 4096),
            ]
            .into_iter()
            .map(move |(op, len)| Bar {
                label: format!("{protocol} {op} {len}"),
                experiment: cost(),
                parts: Box::new(move |v: &Value| {
                    let Some(row) = traffic_row(v, protocol, op, len) else {
                        return vec![];
                    };
                    vec![
                        ("data packets".to_string(), packets(row, "data")),
                        ("protocol packets".to_string(), packets(row, "protocol")),
                    ]
                }),
            })
        })
        .collect();
    Figure {
        id: "dcexpress-packets",
        seed: Seed::DcExpress,
        title: "Packets per command: Moneta, NVMe and DC Express on a gen3 x8 link with 128-byte payloads",
        source: "slides, \"Blast from the past: DC express at gen2x4\" (the count is the model's, read off its link counters: `nvarray presets show dc-express-gen3x8 --protocol-cost`)",
        rows: vec![fewer("read", 512), fewer("read", 4096), fewer("write", 512), fewer("write", 4096)],
        plot: Some(Plot::StackedBars {
            y_label: "packets (TLPs), both directions",
            bars,
        }),
    }
}

fn per_core(iops_path: &'static str) -> Measure {
    of(move |v| Some(at(v, iops_path)? / at(v, "busy_cores")?))
}

fn user_space() -> Experiment {
    Experiment::Nvarray {
        args: [
            "bench",
            "--preset",
            GEN3,
            "--size",
            "64m",
            "--rw",
            "randread",
            "--bs",
            "512",
            "--iodepth",
            "4",
            "--runtime",
            "2s",
            "--json",
        ]
        .map(String::from)
        .to_vec(),
        cpu: true,
    }
}

fn kernel() -> Experiment {
    Experiment::KernelFio {
        device_bytes: 1 << 30,
        fio_args: [
            "--name=kernel",
            "--ioengine=libaio",
            "--direct=1",
            "--rw=randread",
            "--bs=512",
            "--iodepth=32",
            "--numjobs=2",
            "--runtime=2",
            "--time_based",
        ]
        .map(String::from)
        .to_vec(),
    }
}

/// The title of the slide on user space against the kernel.
const KERNELS: &str = "But wait! Kernels aren't ready!";

fn user_vs_kernel() -> Figure {
    Figure {
        id: "dcexpress-user-vs-kernel",
        seed: Seed::DcExpress,
        title: "User space against the kernel: 512 B random reads per busy core (this machine)",
        source: "slides, \"But wait! Kernels aren't ready!\"",
        rows: vec![
            Row {
                id: "dcexpress-user-vs-kernel.user".into(),
                what: "nvarray's user-space driver at QD 4, one thread (dc-express-gen3x8 emulated)".into(),
                unit: "IOPS per core",
                published: Some(1e6),
                published_text: "1 M IOPS on 1 core at QD 4",
                source: dcexpress_slide(KERNELS, "8 CPU cores required to exceed 1 MIOPS ... Userspace access achieves same performance at QD=4 using only 1 core"),
                experiments: vec![user_space()],
                measure: per_core("iops"),
                expect: Expect::Measured,
                note: Some("Busy cores are the whole machine's busy CPU time over the run's wall time (/proc/stat), so the emulated device's thread is counted too."),
            },
            Row {
                id: "dcexpress-user-vs-kernel.kernel".into(),
                what: "the kernel's block path: fio (libaio, O_DIRECT) on a loop device over a RAM file".into(),
                unit: "IOPS per core",
                published: Some(125e3),
                published_text: "8 cores for 1 M IOPS",
                source: dcexpress_slide(KERNELS, "8 CPU cores required to exceed 1 MIOPS through Linux kernel: context switch overhead"),
                experiments: vec![kernel()],
                measure: per_core("jobs_read_iops"),
                expect: Expect::Measured,
                note: Some("The loop device does no device work of its own (a RAM file), so this is the cheapest the kernel's block path gets: its cost per request, not a device's."),
            },
            Row {
                id: "dcexpress-user-vs-kernel.ratio".into(),
                what: "IOPS per busy core, user space / kernel".into(),
                unit: "x",
                published: Some(8.0),
                published_text: "8x",
                source: dcexpress_slide(KERNELS, "8 CPU cores required to exceed 1 MIOPS ... using only 1 core"),
                experiments: vec![user_space(), kernel()],
                measure: Box::new(|o: &[&Value]| {
                    let user = at(o.first()?, "iops")? / at(o.first()?, "busy_cores")?;
                    let kernel = at(o.get(1)?, "jobs_read_iops")? / at(o.get(1)?, "busy_cores")?;
                    Some(user / kernel)
                }),
                expect: Expect::AtLeast(2.0),
                note: None,
            },
        ],
        plot: Some(Plot::RowBars {
            y_label: "IOPS per busy core",
            log_y: true,
        }),
    }
}
