//! Properties of the device state machine over random valid configurations and command
//! streams: every command completes exactly once, never before it was issued or before the
//! moment the model reported it, the breakdown adds up, and events never go back in time.

use std::collections::BTreeMap;

use nvarray_model::presets::PRESETS;
use nvarray_model::{Command, Component, DeviceModel, FabricKind, ModelKind, Op};
use proptest::prelude::*;

fn config(preset: usize, mut overrides: Vec<(String, String)>) -> nvarray_model::DeviceConfig {
    let p = &PRESETS[preset % PRESETS.len()];
    if p.load(&[]).expect("valid preset").memory.disk.is_some() {
        // A disk has one actuator per controller and is not wear-levelled.
        overrides.retain(|(k, _)| k != "memory.banks_per_controller" && k != "wear.enabled");
    }
    p.load(&overrides)
        .unwrap_or_else(|e| panic!("{}: {e}", p.name))
}

fn overrides() -> impl Strategy<Value = Vec<(String, String)>> {
    (
        prop_oneof![Just("fifo"), Just("split-rw"), Just("round-robin")],
        1u32..6,
        1u32..5,
        1u32..9,
        prop_oneof![Just("4096"), Just("8192"), Just("65536")],
        0u64..5000,
        any::<bool>(),
        prop_oneof![Just("none"), Just("rdma"), Just("tcp")],
    )
        .prop_map(
            |(policy, buffers, banks, controllers, buffer_bytes, latency, wear, fabric)| {
                let mut o: Vec<(String, String)> = vec![
                    ("controller.policy".into(), policy.into()),
                    ("controller.buffer_count".into(), buffers.to_string()),
                    ("controller.buffer_bytes".into(), buffer_bytes.into()),
                    ("controller.tags".into(), "8".into()),
                    ("memory.banks_per_controller".into(), banks.to_string()),
                    ("memory.controllers".into(), controllers.to_string()),
                    (
                        "memory.capacity_bytes".into(),
                        (u64::from(controllers) << 24).to_string(),
                    ),
                    ("memory.read_latency_ns".into(), latency.to_string()),
                    ("memory.write_latency_ns".into(), (latency * 3).to_string()),
                    ("wear.enabled".into(), wear.to_string()),
                    ("wear.gap_interval_writes".into(), "3".into()),
                ];
                // A remote device: every property holds with the network in front of it.
                if fabric != "none" {
                    o.push(("fabric.kind".into(), fabric.into()));
                    o.push(("fabric.bandwidth_bytes_per_s".into(), "3000000000".into()));
                    o.push(("fabric.hop_latency_ns".into(), (latency / 2).to_string()));
                    o.push(("fabric.message_overhead_ns".into(), "300".into()));
                }
                if fabric == "tcp" {
                    o.push(("fabric.remote_cpu_ns".into(), "700".into()));
                    o.push(("fabric.remote_cpu_bytes_per_s".into(), "5000000000".into()));
                    o.push(("fabric.remote_cpu_cores".into(), "2".into()));
                }
                o
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_command_completes_once_and_in_order_of_time(
        preset in 0usize..16,
        ov in overrides(),
        cmds in proptest::collection::vec((0u64..20_000, any::<bool>(), 0u64..4096, 1u32..40), 1..120),
    ) {
        let cfg = config(preset, ov);
        let mut dev = DeviceModel::new(&cfg);
        let block = u64::from(cfg.controller.block_bytes);
        let blocks = cfg.memory.capacity_bytes / block;
        let mut now = 0u64;
        let mut issued: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
        let mut done: BTreeMap<u64, u64> = BTreeMap::new();
        let check = |c: nvarray_model::Completion, reported_at: u64, issued: &BTreeMap<u64, (u64, u32)>, done: &mut BTreeMap<u64, u64>| {
            let (submit, len) = issued[&c.id];
            assert_eq!(c.submit_ns, submit);
            assert_eq!(c.len_bytes, len);
            assert!(c.visible_ns >= reported_at, "completion visible at {} reported at {reported_at}", c.visible_ns);
            match cfg.model.kind {
                // Every part of the array takes time.
                ModelKind::Array => assert!(c.visible_ns > submit),
                ModelKind::Null if cfg.fabric.kind == FabricKind::None => {
                    assert_eq!(c.visible_ns, submit + cfg.model.null_latency_ns)
                }
                // Behind a network: the messages' trips on top.
                ModelKind::Null => assert!(c.visible_ns > submit + cfg.model.null_latency_ns),
            }
            assert_eq!(c.breakdown.total_ns(), c.visible_ns - c.submit_ns, "breakdown {:?}", c.breakdown);
            assert!(done.insert(c.id, c.visible_ns).is_none(), "command {} completed twice", c.id);
        };
        for (i, (gap, read, block_index, len_blocks)) in cmds.iter().enumerate() {
            let target = now + gap;
            // Drive the device to `target` one event at a time, as an engine would.
            while let Some(t) = dev.next_event_ns() {
                if t > target { break; }
                assert!(t >= now, "event at {t} before now {now}");
                now = t;
                dev.advance(t, |c| check(c, t, &issued, &mut done));
            }
            now = target;
            let len = (u64::from(*len_blocks) * block).min(u64::from(cfg.controller.max_transfer_bytes)) as u32;
            let offset = (block_index % (blocks - u64::from(len) / block)) * block;
            let cmd = Command { id: i as u64, op: if *read { Op::Read } else { Op::Write }, offset_bytes: offset, len_bytes: len, placement: 0 };
            dev.submit(cmd, now).expect("valid command");
            issued.insert(i as u64, (now, len));
        }
        while let Some(t) = dev.next_event_ns() {
            assert!(t >= now);
            now = t;
            dev.advance(t, |c| check(c, t, &issued, &mut done));
        }
        prop_assert_eq!(done.len(), issued.len(), "every command completes");
        prop_assert_eq!(dev.in_flight(), 0);
    }
}

/// Runs one command alone on the device from `now` and returns its completion.
fn alone(dev: &mut DeviceModel, cmd: Command, now: u64) -> nvarray_model::Completion {
    dev.submit(cmd, now).expect("valid command");
    let mut done = None;
    while let Some(t) = dev.next_event_ns() {
        dev.advance(t, |c| done = Some(c));
    }
    done.expect("the command completes")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// One stream at queue depth 1 has nothing to wait for but itself: however a request is
    /// split into pieces (up to the largest transfer, over any buffer count and size), its
    /// breakdown shows no queueing, and the stages add up to its latency.
    #[test]
    fn alone_at_queue_depth_one_a_request_never_queues(
        preset in 0usize..16,
        ov in overrides(),
        protocol in prop_oneof![Just("moneta"), Just("nvme"), Just("dc-express")],
        cmds in proptest::collection::vec((any::<bool>(), 0u64..4096, 1u64..4096, 0u64..3000), 1..12),
    ) {
        let mut ov = ov;
        ov.push(("interface.protocol".into(), protocol.into()));
        let cfg = config(preset, ov);
        let mut dev = DeviceModel::new(&cfg);
        let block = u64::from(cfg.controller.block_bytes);
        let blocks = cfg.memory.capacity_bytes / block;
        let mut now = 0;
        for (i, (read, block_index, len_blocks, gap)) in cmds.into_iter().enumerate() {
            let len = (len_blocks * block).min(u64::from(cfg.controller.max_transfer_bytes)) as u32;
            let offset = (block_index % (blocks - u64::from(len) / block)) * block;
            let op = if read { Op::Read } else { Op::Write };
            let cmd = Command { id: i as u64, op, offset_bytes: offset, len_bytes: len, placement: 0 };
            let c = alone(&mut dev, cmd, now + gap);
            let b = c.breakdown;
            prop_assert_eq!(
                b.get(Component::Queueing), 0,
                "{} {:?} of {} bytes (buffers of {}): {:?}",
                cfg.name, op, len, cfg.controller.buffer_bytes, b
            );
            prop_assert_eq!(b.total_ns(), c.visible_ns - c.submit_ns);
            now = c.visible_ns;
        }
    }
}

/// A large read alone on Moneta's link: the link holds the request nearly all the time (it is
/// 98 % busy), so the breakdown must say link, not queueing (before the critical-path walk it
/// said 309 µs of queueing and 2.4 µs of link).
#[test]
fn a_pipelined_large_request_is_attributed_to_its_bottleneck() {
    let cfg = PRESETS[0].load(&[]).unwrap();
    assert_eq!(cfg.name, "moneta");
    for op in [Op::Read, Op::Write] {
        let mut dev = DeviceModel::new(&cfg);
        let cmd = Command {
            id: 0,
            op,
            offset_bytes: 0,
            len_bytes: 512 << 10,
            placement: 0,
        };
        let c = alone(&mut dev, cmd, 0);
        let latency = (c.visible_ns - c.submit_ns) as f64;
        let link = c.breakdown.get(Component::Link) as f64;
        // 512 KiB at ~1.68 GB/s is ~312 µs of the ~317 µs.
        assert!(link / latency > 0.95, "{op:?}: {:?}", c.breakdown);
    }
}

#[test]
fn bad_commands_are_refused_and_change_nothing() {
    let cfg = PRESETS[0].load(&[]).unwrap();
    let mut dev = DeviceModel::new(&cfg);
    let size = cfg.memory.capacity_bytes;
    let max = cfg.controller.max_transfer_bytes;
    for (offset, len) in [
        (size, 512),
        (size - 512, 1024),
        (u64::MAX - 100, 512),
        (1, 512),
        (0, 100),
        (0, 0),
        (0, max + 512),
    ] {
        let cmd = Command {
            id: 1,
            op: Op::Write,
            offset_bytes: offset,
            len_bytes: len,
            placement: 0,
        };
        assert!(
            dev.submit(cmd, 0).is_err(),
            "offset {offset} len {len} accepted"
        );
    }
    assert_eq!(dev.in_flight(), 0);
    assert_eq!(dev.next_event_ns(), None);
}
