//! The model against its frozen reference (`nvarray-model-reference`, the model before issue
//! 38's redesign): driven with the same random command streams, every preset, reads and
//! writes from one block to many buffers' worth, bursts and idle gaps, queue depths up to
//! the tag limit, all three protocols, both controller modes, all three policies, fabric on
//! and off, wear levelling on and off. Every completion (time and breakdown), the next event
//! time after every call, and at the end every resource's busy time, the link's traffic and
//! the wear and erase counts must be identical: the redesign makes the model faster, not
//! different.
//!
//! Both are built from one `DeviceConfig` (the reference takes its configuration from this
//! crate); their results are separate types with the same shape, so they are compared through
//! their `Debug` text, which prints every field.

use nvarray_model::presets::PRESETS;
use nvarray_model::{Command, DeviceModel, Op};
use nvarray_model_reference as reference;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

/// A configuration's overrides, applied to both models' copy of the same preset.
fn overrides() -> impl Strategy<Value = Vec<(String, String)>> {
    (
        (
            prop_oneof![Just("fifo"), Just("split-rw"), Just("round-robin")],
            prop_oneof![Just(""), Just("moneta"), Just("nvme"), Just("dc-express")],
            prop_oneof![Just(""), Just("hardware"), Just("firmware")],
            1u32..4,
        ),
        (
            1u32..9,
            prop_oneof![Just("4096"), Just("8192"), Just("65536")],
            prop_oneof![Just(4u32), Just(8), Just(32), Just(64)],
        ),
        prop_oneof![Just(""), Just("true"), Just("false")],
        prop_oneof![Just("none"), Just("rdma"), Just("tcp")],
    )
        .prop_map(
            |((policy, protocol, mode, cores), (buffers, buffer_bytes, tags), wear, fabric)| {
                let mut o: Vec<(String, String)> = vec![
                    ("controller.policy".into(), policy.into()),
                    ("controller.buffer_count".into(), buffers.to_string()),
                    ("controller.buffer_bytes".into(), buffer_bytes.into()),
                    ("controller.tags".into(), tags.to_string()),
                    ("controller.firmware_cores".into(), cores.to_string()),
                    ("wear.gap_interval_writes".into(), "3".into()),
                ];
                if !protocol.is_empty() {
                    o.push(("interface.protocol".into(), protocol.into()));
                }
                if !mode.is_empty() {
                    o.push(("controller.mode".into(), mode.into()));
                }
                if !wear.is_empty() {
                    o.push(("wear.enabled".into(), wear.into()));
                }
                if fabric != "none" {
                    o.push(("fabric.kind".into(), fabric.into()));
                    o.push(("fabric.bandwidth_bytes_per_s".into(), "3000000000".into()));
                    o.push(("fabric.hop_latency_ns".into(), "900".into()));
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

/// One step of a stream: an idle gap before it (0 for a burst), the command, and the queue
/// depth the host keeps at most while issuing it.
#[derive(Clone, Debug)]
struct Step {
    gap_ns: u64,
    write: bool,
    offset_draw: u64,
    len_blocks: u32,
    /// The offset a multiple of the length, as fio's block-sized random offsets are (what
    /// keeps the memory's controllers in lockstep when the length is a round of stripes).
    aligned: bool,
    queue_depth: usize,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        prop_oneof![3 => Just(0u64), 2 => 0u64..2_000, 1 => 0u64..200_000],
        any::<bool>(),
        any::<u64>(),
        prop_oneof![
            4 => 1u32..9,
            2 => 1u32..130,
            1 => 1u32..600,
            3 => (1u32..5).prop_map(|k| 8 * k),
        ],
        any::<bool>(),
        1usize..80,
    )
        .prop_map(
            |(gap_ns, write, offset_draw, len_blocks, aligned, queue_depth)| Step {
                gap_ns,
                write,
                offset_draw,
                len_blocks,
                aligned,
                queue_depth,
            },
        );
    proptest::collection::vec(step, 1..160)
}

/// The two models side by side; every call goes to both and what they say is compared.
struct Pair {
    live: DeviceModel,
    reference: reference::DeviceModel,
}

impl Pair {
    fn advance(&mut self, now: u64) -> Result<(), TestCaseError> {
        let mut live = Vec::new();
        let mut frozen = Vec::new();
        self.live.advance(now, |c| live.push(format!("{c:?}")));
        self.reference
            .advance(now, |c| frozen.push(format!("{c:?}")));
        prop_assert_eq!(live, frozen, "completions at {}", now);
        self.same_next_event()
    }

    fn same_next_event(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            self.live.next_event_ns(),
            self.reference.next_event_ns(),
            "next event"
        );
        prop_assert_eq!(self.live.in_flight(), self.reference.in_flight());
        Ok(())
    }

    fn same_totals(&self) -> Result<(), TestCaseError> {
        let (l, r) = (&self.live, &self.reference);
        prop_assert_eq!(
            format!("{:?}", l.resource_busy()),
            format!("{:?}", r.resource_busy())
        );
        prop_assert_eq!(
            format!("{:?}", l.link_traffic()),
            format!("{:?}", r.link_traffic())
        );
        prop_assert_eq!(
            format!("{:?}", l.wear_stats()),
            format!("{:?}", r.wear_stats())
        );
        prop_assert_eq!(l.erases(), r.erases());
        prop_assert_eq!(l.commands_done(), r.commands_done());
        Ok(())
    }
}

fn run(preset: usize, mut ov: Vec<(String, String)>, steps: &[Step]) -> Result<(), TestCaseError> {
    let p = &PRESETS[preset % PRESETS.len()];
    let base = p.load(&[]).expect("valid preset");
    if base.memory.disk.is_some() {
        // A disk has one actuator per controller and is not wear-levelled.
        ov.retain(|(k, _)| k != "wear.enabled");
    }
    let cfg = p
        .load(&ov)
        .unwrap_or_else(|e| panic!("{} with {ov:?}: {e}", p.name));
    let mut pair = Pair {
        live: DeviceModel::new(&cfg),
        reference: reference::DeviceModel::new(&cfg),
    };
    let block = u64::from(cfg.controller.block_bytes);
    let max_blocks = cfg.controller.max_transfer_bytes / cfg.controller.block_bytes;
    let blocks = cfg.memory.capacity_bytes / block;
    let tags = cfg.controller.tags as usize;
    let mut now = 0u64;
    for (id, step) in steps.iter().enumerate() {
        now += step.gap_ns;
        pair.advance(now)?;
        // Up to the tag limit and a little past it (commands then wait for a tag).
        let depth = step.queue_depth.min(tags + 4);
        while pair.live.in_flight() >= depth {
            now = pair.live.next_event_ns().expect("commands in flight");
            pair.advance(now)?;
        }
        let len_blocks = step.len_blocks.min(max_blocks).max(1);
        let len = u64::from(len_blocks);
        let offset_blocks = if step.aligned {
            step.offset_draw % (blocks / len) * len
        } else {
            step.offset_draw % (blocks - len + 1)
        };
        let (op, reference_op) = if step.write {
            (Op::Write, reference::Op::Write)
        } else {
            (Op::Read, reference::Op::Read)
        };
        let (offset_bytes, len_bytes) = (offset_blocks * block, len_blocks * block as u32);
        let live = pair.live.submit(
            Command {
                id: id as u64,
                op,
                offset_bytes,
                len_bytes,
                placement: 0,
            },
            now,
        );
        let frozen = pair.reference.submit(
            reference::Command {
                id: id as u64,
                op: reference_op,
                offset_bytes,
                len_bytes,
            },
            now,
        );
        prop_assert_eq!(format!("{live:?}"), format!("{frozen:?}"));
        pair.same_next_event()?;
    }
    while let Some(t) = pair.live.next_event_ns() {
        now = t;
        pair.advance(now)?;
    }
    pair.same_totals()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_model_matches_its_reference_command_for_command(
        preset in 0usize..64,
        ov in overrides(),
        steps in steps(),
    ) {
        run(preset, ov, &steps)?;
    }
}

/// Every preset as it ships, four deterministic streams each: the calibrated configurations
/// themselves, not only the random variations above.
#[test]
fn every_preset_as_shipped_matches_its_reference() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let stream = steps();
    for (preset, p) in PRESETS.iter().enumerate() {
        for _ in 0..4 {
            let tree = stream.new_tree(&mut runner).expect("a stream");
            run(preset, Vec::new(), &tree.current()).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
    }
}

/// Issue 56: the emulator hands the model each command at its doorbell's time stamp, but only
/// when its device thread next visits, possibly much later in real time, several commands at
/// once (`engine::visit`: advance to each command's arrival, submit it there, in arrival
/// order, then advance to the visit's clock). The model's results must not depend on when
/// the visits happen: driven that way, in batches at later times, it gives every completion
/// (time and breakdown) and every total exactly as the frozen reference does when driven in
/// real time, each command submitted as it arrives.
fn batched_visits(
    preset: usize,
    ov: Vec<(String, String)>,
    steps: &[Step],
    visits: &[(bool, u64)],
) -> Result<(), TestCaseError> {
    let p = &PRESETS[preset % PRESETS.len()];
    let cfg = p
        .load(&ov)
        .or_else(|_| p.load(&[]))
        .unwrap_or_else(|e| panic!("{}: {e}", p.name));
    let block = u64::from(cfg.controller.block_bytes);
    let max_blocks = cfg.controller.max_transfer_bytes / cfg.controller.block_bytes;
    let blocks = cfg.memory.capacity_bytes / block;
    // The commands and their arrivals (open loop: past the tags, they wait for one).
    let mut at = 0u64;
    let commands: Vec<(u64, bool, u64, u32)> = steps
        .iter()
        .map(|step| {
            at += step.gap_ns;
            let len = step.len_blocks.min(max_blocks).max(1);
            let offset = step.offset_draw % (blocks - u64::from(len) + 1);
            (at, step.write, offset * block, len * block as u32)
        })
        .collect();
    // The reference, in real time.
    let mut reference = reference::DeviceModel::new(&cfg);
    let mut frozen = Vec::new();
    for (id, &(at, write, offset_bytes, len_bytes)) in commands.iter().enumerate() {
        reference.advance(at, |c| frozen.push(format!("{c:?}")));
        let op = if write {
            reference::Op::Write
        } else {
            reference::Op::Read
        };
        let cmd = reference::Command {
            id: id as u64,
            op,
            offset_bytes,
            len_bytes,
        };
        reference.submit(cmd, at).expect("a command in range");
    }
    while let Some(t) = reference.next_event_ns() {
        reference.advance(t, |c| frozen.push(format!("{c:?}")));
    }
    // The live model, visited as the emulator does: a visit takes the commands that arrived
    // since the last one, at a time no earlier than the last of them and no later than the
    // next arrival (a command never arrives before the model's time: its stamp would be
    // clamped to it), and now and then a visit with nothing to take.
    let mut live = DeviceModel::new(&cfg);
    let mut seen = Vec::new();
    let mut batch: Vec<usize> = Vec::new();
    for (id, &(at, ..)) in commands.iter().enumerate() {
        batch.push(id);
        let (ends, lag) = visits[id % visits.len()];
        let next = commands.get(id + 1).map_or(u64::MAX, |c| c.0);
        if !ends && next != u64::MAX {
            continue;
        }
        let visit_ns = at + lag.min(next - at);
        for &k in &batch {
            let (at, write, offset_bytes, len_bytes) = commands[k];
            live.advance(at, |c| seen.push(format!("{c:?}")));
            let op = if write { Op::Write } else { Op::Read };
            let cmd = Command {
                id: k as u64,
                op,
                offset_bytes,
                len_bytes,
                placement: 0,
            };
            live.submit(cmd, at).expect("a command in range");
        }
        batch.clear();
        live.advance(visit_ns, |c| seen.push(format!("{c:?}")));
    }
    while let Some(t) = live.next_event_ns() {
        live.advance(t, |c| seen.push(format!("{c:?}")));
    }
    prop_assert_eq!(seen, frozen);
    prop_assert_eq!(
        format!("{:?}", live.resource_busy()),
        format!("{:?}", reference.resource_busy())
    );
    prop_assert_eq!(live.commands_done(), reference.commands_done());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn commands_taken_in_batches_at_later_times_give_the_results_of_real_time(
        preset in 0usize..64,
        ov in overrides(),
        steps in steps(),
        visits in proptest::collection::vec(
            (any::<bool>(), prop_oneof![Just(0u64), 0u64..5_000, 0u64..2_000_000]),
            1..16,
        ),
    ) {
        batched_visits(preset, ov, &steps, &visits)?;
    }
}
