//! Zoned namespaces (NVMe ZNS) through the driver and the emulated device, in both command
//! encodings: the status of every refusal the command path can provoke, in the
//! specification's order of checks, zone management and report zones, and Zone Append from
//! concurrent writers.
//!
//! Zone Is Read Only and Zone Is Offline need a media failure, which no command causes: the
//! state machine's own tests (`nvarray-ftl/tests/zones.rs`) provoke them.

use nvarray_host::{
    Device, HostError, Opcode, Options, QueuePair, Status, ZoneAction, ZoneDescriptor, ZoneState,
};
use nvarray_model::presets::preset;

mod common;

const ZONE: u64 = 1 << 20;
/// Writable bytes of a zone: a quarter of it, so a write can run past the capacity well
/// inside the zone.
const ZONE_CAPACITY: u64 = 256 << 10;

/// 16 MiB of TLC as 16 zones of 1 MiB (256 KiB writable), at most 2 open and 3 active,
/// speaking `protocol`.
fn zoned_device(protocol: &str, extra: &[(&str, &str)]) -> Device {
    let zone = ZONE.to_string();
    let capacity = ZONE_CAPACITY.to_string();
    let overrides: Vec<(&str, &str)> = [
        ("memory.capacity_bytes", "16m"),
        ("memory.erase_block_bytes", "16k"),
        ("zns.enabled", "true"),
        ("zns.zone_bytes", zone.as_str()),
        ("zns.zone_capacity_bytes", capacity.as_str()),
        ("interface.protocol", protocol),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    common::tlc_device(&overrides)
}

fn status_of(result: Result<impl std::fmt::Debug, HostError>) -> Status {
    match result {
        Err(HostError::Command { status, .. }) => status,
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(other) => panic!("expected a device status, got {other}"),
    }
}

fn zone_state(qp: &mut QueuePair, device: &Device, zone: u64) -> ZoneDescriptor {
    qp.report_zones(device, zone * ZONE).unwrap()[0]
}

/// Every status the command path can give a zoned command, each provoked where the
/// specification's order of checks decides it (state, then write pointer, then capacity, then
/// resources), and the zone left as it was by each refusal.
#[test]
fn every_zone_status_the_command_path_gives_is_provoked_in_order() {
    for protocol in ["nvme", "moneta"] {
        let device = zoned_device(
            protocol,
            &[("zns.max_open_zones", "2"), ("zns.max_active_zones", "3")],
        );
        let block = u64::from(device.block_bytes());
        let mut qp = device.queue_pair(device.completion());
        let data = vec![0x3cu8; 64 * 1024];
        let write =
            |qp: &mut QueuePair, at: u64, len: usize| qp.write_at(&device, &data[..len], at);

        // A write at the write pointer opens its zone implicitly.
        write(&mut qp, 0, 4096).unwrap();
        let z0 = zone_state(&mut qp, &device, 0);
        assert_eq!(
            (z0.state, z0.write_pointer, z0.capacity_blocks),
            (
                ZoneState::ImplicitlyOpened,
                4096 / block,
                ZONE_CAPACITY / block
            ),
            "{protocol}"
        );
        // Not at the write pointer: Zone Invalid Write, nothing moves.
        assert_eq!(
            status_of(write(&mut qp, 0, 4096)),
            Status::ZoneInvalidWrite,
            "{protocol}"
        );
        // At the write pointer but past the capacity: Zone Boundary Error.
        let near_end = ZONE_CAPACITY - 4096;
        qp.write_at(&device, &vec![1u8; (near_end - 4096) as usize], 4096)
            .unwrap();
        assert_eq!(
            status_of(write(&mut qp, near_end, 8192)),
            Status::ZoneBoundaryError,
            "{protocol}"
        );
        assert_eq!(
            zone_state(&mut qp, &device, 0).write_pointer,
            near_end / block
        );
        // Filling it exactly makes it full and gives back its resources; then the state is
        // checked first: Zone Is Full even off the write pointer.
        write(&mut qp, near_end, 4096).unwrap();
        assert_eq!(
            zone_state(&mut qp, &device, 0).state,
            ZoneState::Full,
            "{protocol}"
        );
        assert_eq!(
            status_of(write(&mut qp, 0, 512)),
            Status::ZoneIsFull,
            "{protocol}"
        );
        // Opening a full zone: Invalid Zone State Transition.
        assert_eq!(
            status_of(qp.zone_manage(&device, 0, ZoneAction::Open, false)),
            Status::InvalidZoneStateTransition,
            "{protocol}"
        );

        // Open limit 2: a third implicit open closes the first implicitly opened zone.
        for zone in 1..=3 {
            write(&mut qp, zone * ZONE, 512).unwrap();
        }
        let states: Vec<ZoneState> = (1..=3)
            .map(|z| zone_state(&mut qp, &device, z).state)
            .collect();
        assert_eq!(
            states,
            [
                ZoneState::Closed,
                ZoneState::ImplicitlyOpened,
                ZoneState::ImplicitlyOpened
            ],
            "{protocol}"
        );
        // Active limit 3 (zones 1-3): a fourth zone cannot open.
        assert_eq!(
            status_of(write(&mut qp, 4 * ZONE, 512)),
            Status::TooManyActiveZones,
            "{protocol}"
        );
        assert_eq!(
            zone_state(&mut qp, &device, 4).state,
            ZoneState::Empty,
            "{protocol}"
        );

        // Reset everything (Select All), then hold the open limit with explicit opens, which
        // the device never closes: Too Many Open Zones.
        qp.zone_manage(&device, 0, ZoneAction::Reset, true).unwrap();
        let all = qp.report_zones(&device, 0).unwrap();
        assert_eq!(all.len(), 16, "{protocol}");
        assert!(
            all.iter()
                .enumerate()
                .all(|(i, z)| z.state == ZoneState::Empty
                    && z.write_pointer == i as u64 * ZONE / block),
            "{protocol}: {all:?}"
        );
        qp.zone_manage(&device, 5 * ZONE, ZoneAction::Open, false)
            .unwrap();
        qp.zone_manage(&device, 6 * ZONE, ZoneAction::Open, false)
            .unwrap();
        assert_eq!(
            status_of(write(&mut qp, 7 * ZONE, 512)),
            Status::TooManyOpenZones,
            "{protocol}"
        );
        assert_eq!(
            status_of(qp.zone_manage(&device, 7 * ZONE, ZoneAction::Open, false)),
            Status::TooManyOpenZones,
            "{protocol}"
        );
        // Close an explicitly opened empty zone: it goes back to empty, freeing its resources.
        qp.zone_manage(&device, 5 * ZONE, ZoneAction::Close, false)
            .unwrap();
        assert_eq!(
            zone_state(&mut qp, &device, 5).state,
            ZoneState::Empty,
            "{protocol}"
        );
        write(&mut qp, 7 * ZONE, 512).unwrap();
        // Finish: full, the write pointer at the capacity.
        qp.zone_manage(&device, 7 * ZONE, ZoneAction::Finish, false)
            .unwrap();
        let z7 = zone_state(&mut qp, &device, 7);
        assert_eq!(
            (z7.state, z7.write_pointer),
            (ZoneState::Full, (7 * ZONE + ZONE_CAPACITY) / block)
        );

        // Zone Append names its zone's first block; anything else is an invalid field.
        assert_eq!(
            qp.zone_append(&device, 8 * ZONE, &data[..4096]).unwrap(),
            8 * ZONE / block,
            "{protocol}"
        );
        assert_eq!(
            qp.zone_append(&device, 8 * ZONE, &data[..1024]).unwrap(),
            (8 * ZONE + 4096) / block,
            "{protocol}"
        );
        assert_eq!(
            status_of(qp.zone_append(&device, 8 * ZONE + 512, &data[..512])),
            Status::BadField,
            "{protocol}"
        );
        // Management of a block that is not a zone's first: invalid field too.
        assert_eq!(
            status_of(qp.zone_manage(&device, 8 * ZONE + 512, ZoneAction::Reset, false)),
            Status::BadField,
            "{protocol}"
        );
        // Reads anywhere inside the namespace are fine, above the write pointer too.
        let mut out = vec![0u8; 8192];
        qp.read_at(&device, &mut out, 8 * ZONE).unwrap();
        assert!(out[..5120].iter().all(|&b| b == 0x3c), "{protocol}");
    }
}

/// The zone commands are the zoned command set's: a namespace without zones refuses them in
/// the driver, and the device refuses their opcodes.
#[test]
fn a_namespace_without_zones_refuses_zone_commands() {
    let config = preset("tlc")
        .unwrap()
        .load(&[("memory.capacity_bytes".into(), "16m".into())])
        .unwrap();
    let device = Device::open(&config, &Options::default()).unwrap();
    let mut qp = device.queue_pair(device.completion());
    assert!(matches!(
        qp.zone_append(&device, 0, &[0u8; 512]),
        Err(HostError::NotZoned { .. })
    ));
    assert!(matches!(
        qp.report_zones(&device, 0),
        Err(HostError::NotZoned { .. })
    ));
    // Zone Append's opcode sent anyway (0x7d), with a write's data.
    let p = device
        .prepare(Opcode::Write, 0, 512, Some(&[7u8; 512]))
        .unwrap()
        .with_raw_opcode(0x7d);
    qp.issue(p);
    let mut got = None;
    while got.is_none() {
        qp.wait(|done| got = Some(device.finish(done, None)));
    }
    assert_eq!(status_of(got.unwrap()), Status::BadOpcode);
    let mut out = [1u8; 512];
    qp.read_at(&device, &mut out, 0).unwrap();
    assert_eq!(out, [0u8; 512], "the refused append wrote nothing");
}

/// Eight writers append to one zone at once, each on its own queue pair: every block of the
/// zone is written exactly once, each append's data is where the device said it went, and the
/// zone is full when they are done.
#[test]
fn zone_append_from_eight_writers_writes_every_block_once() {
    for protocol in ["nvme", "moneta"] {
        let device = zoned_device(protocol, &[]);
        let block = device.block_bytes() as usize;
        let writers = 8usize;
        let per_writer = ZONE_CAPACITY as usize / block / writers;
        let zone_start = 3 * ZONE;
        let completion = device.completion();
        let placed: Vec<Vec<(u64, u8)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let device = &device;
                    s.spawn(move || {
                        let mut qp = device.queue_pair(completion);
                        (0..per_writer)
                            .map(|i| {
                                let tag = (w * per_writer + i) as u8 ^ 0x80;
                                let data = vec![tag; block];
                                (qp.zone_append(device, zone_start, &data).unwrap(), tag)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut blocks: Vec<u64> = placed.iter().flatten().map(|&(at, _)| at).collect();
        blocks.sort_unstable();
        let first = zone_start / block as u64;
        let expected: Vec<u64> = (first..first + (writers * per_writer) as u64).collect();
        assert_eq!(
            blocks, expected,
            "{protocol}: each block of the zone exactly once"
        );
        let mut qp = device.queue_pair(completion);
        let mut zone = vec![0u8; ZONE_CAPACITY as usize];
        qp.read_at(&device, &mut zone, zone_start).unwrap();
        for &(at, tag) in placed.iter().flatten() {
            let offset = (at - first) as usize * block;
            assert!(
                zone[offset..offset + block].iter().all(|&b| b == tag),
                "{protocol}: block {at} does not hold its append's data"
            );
        }
        let z = zone_state(&mut qp, &device, 3);
        assert_eq!(z.state, ZoneState::Full, "{protocol}");
        assert_eq!(
            status_of(qp.zone_append(&device, zone_start, &vec![0u8; block])),
            Status::ZoneIsFull,
            "{protocol}"
        );
    }
}
