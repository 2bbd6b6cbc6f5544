//! The network in front of a remote device (`[fabric]`): what one command pays for it, exactly;
//! the remote CPU on a TCP path; the wire's bandwidth bounding a busy device; bad settings
//! refused with the field named.

use nvarray_model::presets::preset;
use nvarray_model::{Command, Completion, Component, DeviceConfig, DeviceModel, Op};

fn device(overrides: &[(&str, &str)]) -> DeviceConfig {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    preset("dram").unwrap().load(&o).unwrap()
}

const RDMA: [(&str, &str); 5] = [
    ("fabric.kind", "rdma"),
    ("fabric.bandwidth_bytes_per_s", "1000000000"),
    ("fabric.hop_latency_ns", "250"),
    ("fabric.hops", "2"),
    ("fabric.message_overhead_ns", "400"),
];

/// One command alone on a fresh device.
fn alone(cfg: &DeviceConfig, op: Op, len_bytes: u32) -> Completion {
    let mut dev = DeviceModel::new(cfg);
    dev.submit(
        Command {
            id: 7,
            op,
            offset_bytes: 1 << 20,
            len_bytes,
            placement: 0,
        },
        1000,
    )
    .unwrap();
    let mut done = None;
    while let Some(t) = dev.next_event_ns() {
        dev.advance(t, |c| done = Some(c));
    }
    assert_eq!(dev.in_flight(), 0);
    done.expect("completes")
}

#[test]
fn a_remote_command_pays_both_messages_and_nothing_else_changes() {
    let local = device(&[]);
    let remote = device(&RDMA);
    for (op, len) in [(Op::Read, 4096u32), (Op::Write, 4096), (Op::Read, 512)] {
        let l = alone(&local, op, len);
        let r = alone(&remote, op, len);
        // 1 GB/s: a byte a nanosecond. The request carries a write's data, the response a read's.
        let header = 64;
        let (request, response) = match op {
            Op::Read => (header, header + u64::from(len)),
            Op::Write => (header + u64::from(len), header),
        };
        let per_message = 2 * 250 + 400;
        let fabric = request + response + 2 * per_message;
        assert_eq!(r.breakdown.get(Component::Fabric), fabric, "{op:?} {len}");
        assert_eq!(
            r.breakdown.get(Component::Queueing),
            0,
            "alone, nothing waits"
        );
        assert_eq!(
            r.visible_ns - r.submit_ns,
            l.visible_ns - l.submit_ns + fabric,
            "{op:?} {len}: the device's own time is unchanged"
        );
        assert_eq!(r.submit_ns, 1000);
        assert_eq!(r.breakdown.total_ns(), r.visible_ns - r.submit_ns);
        for c in Component::ALL {
            if c != Component::Fabric {
                assert_eq!(r.breakdown.get(c), l.breakdown.get(c), "{c:?}");
            }
        }
    }
}

#[test]
fn tcp_puts_the_remote_cpu_on_both_messages_and_its_cores_queue() {
    let mut o = RDMA.to_vec();
    o[0] = ("fabric.kind", "tcp");
    o.push(("fabric.remote_cpu_ns", "3000"));
    o.push(("fabric.remote_cpu_bytes_per_s", "2000000000"));
    let tcp = device(&o);
    let rdma = device(&RDMA);
    let (t, r) = (alone(&tcp, Op::Read, 4096), alone(&rdma, Op::Read, 4096));
    // Each message: 3 us plus its bytes copied at 2 bytes a nanosecond.
    let cpu = 2 * 3000 + (64u64).div_ceil(2) + (64 + 4096u64).div_ceil(2);
    assert_eq!(
        t.breakdown.get(Component::Fabric),
        r.breakdown.get(Component::Fabric) + cpu
    );

    // Eight commands at once on one core: each waits for the ones before it on the CPU.
    let mut dev = DeviceModel::new(&tcp);
    for id in 0..8 {
        dev.submit(
            Command {
                id,
                op: Op::Read,
                offset_bytes: id * 4096,
                len_bytes: 512,
                placement: 0,
            },
            0,
        )
        .unwrap();
    }
    let mut done = Vec::new();
    while let Some(t) = dev.next_event_ns() {
        dev.advance(t, |c| done.push(c));
    }
    assert_eq!(done.len(), 8);
    let waited: u64 = done
        .iter()
        .map(|c| c.breakdown.get(Component::Queueing))
        .sum();
    assert!(
        waited >= 7 * 3000,
        "the last waits for seven turns: {waited}"
    );
    for c in &done {
        assert_eq!(c.breakdown.total_ns(), c.visible_ns - c.submit_ns);
    }
}

#[test]
fn the_wire_bounds_a_busy_device() {
    // 64 KiB writes, 32 outstanding, over 1 GB/s: the device alone moves far more.
    let cfg = device(&RDMA);
    let mut dev = DeviceModel::new(&cfg);
    let len = 65_536u32;
    let (mut next_id, mut now, mut bytes) = (0u64, 0u64, 0u64);
    let submit = |dev: &mut DeviceModel, now: u64, next_id: &mut u64| {
        dev.submit(
            Command {
                id: *next_id,
                op: Op::Write,
                offset_bytes: (*next_id % 1000) * u64::from(len),
                len_bytes: len,
                placement: 0,
            },
            now,
        )
        .unwrap();
        *next_id += 1;
    };
    for _ in 0..32 {
        submit(&mut dev, now, &mut next_id);
    }
    while next_id < 2000 {
        let t = dev.next_event_ns().expect("work in flight");
        let mut finished = 0;
        dev.advance(t, |c| {
            finished += 1;
            now = now.max(c.visible_ns);
        });
        now = now.max(t);
        for _ in 0..finished {
            bytes += u64::from(len);
            submit(&mut dev, now, &mut next_id);
        }
    }
    let rate = bytes as f64 / now as f64; // bytes per ns = GB/s
    assert!(rate <= 1.0, "{rate} GB/s over a 1 GB/s wire");
    assert!(
        rate > 0.95,
        "{rate} GB/s: the wire should be the bottleneck"
    );
}

#[test]
fn bad_fabrics_name_their_field() {
    let bad = |o: &[(&str, &str)], field: &str| {
        let o: Vec<(String, String)> = o
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let e = preset("dram").unwrap().load(&o).unwrap_err().to_string();
        assert!(e.contains(field), "{o:?}: {e}");
    };
    bad(&[("fabric.kind", "rdma")], "fabric.bandwidth_bytes_per_s");
    bad(
        &[
            ("fabric.kind", "rdma"),
            ("fabric.bandwidth_bytes_per_s", "1g"),
            ("fabric.remote_cpu_ns", "100"),
        ],
        "fabric.remote_cpu_ns",
    );
    bad(&[("fabric.hops", "0")], "fabric.hops");
    bad(&[("fabric.kind", "infiniband")], "fabric.kind");
    bad(
        &[("fabric.remote_cpu_cores", "0")],
        "fabric.remote_cpu_cores",
    );
}
