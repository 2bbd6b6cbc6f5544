//! Zoned namespaces (issue 41): every status code of the conformance table provoked, the
//! state machine's transitions and resource limits, and Zone Append under 8 writers at once.

use std::sync::{Arc, Mutex};

use nvarray_ftl::zones::{ZoneAction, ZoneLayout, ZoneState, ZoneStatus, Zones};

const ZONE: u64 = 64;
const CAP: u64 = 48;

fn zones(max_open: u32, max_active: u32) -> Zones {
    Zones::new(ZoneLayout {
        zones: 8,
        zone_blocks: ZONE,
        capacity_blocks: CAP,
        max_open,
        max_active,
    })
    .unwrap()
}

fn state(z: &Zones, zone: u32) -> ZoneState {
    z.descriptor(zone).state
}

/// Each status, the command that provokes it, and its code in the ZNS command set.
#[test]
fn every_status_code_is_provoked_with_its_code() {
    let mut table: Vec<(ZoneStatus, (u8, u8))> = Vec::new();
    let mut expect = |got: Result<(), ZoneStatus>, want: ZoneStatus, code: (u8, u8)| {
        assert_eq!(got, Err(want));
        assert_eq!(want.code(), code, "{want}");
        table.push((want, code));
    };
    let mut z = zones(2, 3);
    // Out of range, and an append that does not name its zone's start.
    expect(z.write(8 * ZONE, 1), ZoneStatus::LbaOutOfRange, (0, 0x80));
    expect(
        z.append(1, 1).map(|_| ()),
        ZoneStatus::InvalidField,
        (0, 0x02),
    );
    // Not at the write pointer.
    expect(z.write(5, 1), ZoneStatus::ZoneInvalidWrite, (1, 0xBC));
    // Past the capacity (the zone's size is larger: capacity is the bound).
    expect(
        z.write(0, CAP + 1),
        ZoneStatus::ZoneBoundaryError,
        (1, 0xB8),
    );
    // Full.
    z.write(0, CAP).unwrap();
    assert_eq!(state(&z, 0), ZoneState::Full);
    expect(z.write(CAP, 1), ZoneStatus::ZoneIsFull, (1, 0xB9));
    // Read only and offline.
    z.fail(1, ZoneState::ReadOnly);
    expect(z.write(ZONE, 1), ZoneStatus::ZoneIsReadOnly, (1, 0xBA));
    z.fail(2, ZoneState::Offline);
    expect(z.write(2 * ZONE, 1), ZoneStatus::ZoneIsOffline, (1, 0xBB));
    assert_eq!(z.read(2 * ZONE, 1), Err(ZoneStatus::ZoneIsOffline));
    expect(
        z.manage(2 * ZONE, ZoneAction::Reset),
        ZoneStatus::InvalidZoneStateTransition,
        (1, 0xBF),
    );
    // Too many open: two explicitly opened zones are never auto-closed.
    z.manage(3 * ZONE, ZoneAction::Open).unwrap();
    z.manage(4 * ZONE, ZoneAction::Open).unwrap();
    expect(
        z.write(5 * ZONE, 1),
        ZoneStatus::TooManyOpenZones,
        (1, 0xBE),
    );
    // Too many active: close both (still active), open a third, then a fourth zone.
    z.write(3 * ZONE, 1).unwrap();
    z.write(4 * ZONE, 1).unwrap();
    z.manage(3 * ZONE, ZoneAction::Close).unwrap();
    z.manage(4 * ZONE, ZoneAction::Close).unwrap();
    z.write(5 * ZONE, 1).unwrap();
    expect(
        z.write(6 * ZONE, 1),
        ZoneStatus::TooManyActiveZones,
        (1, 0xBD),
    );
    z.check_consistency().unwrap();
    assert_eq!(table.len(), 10, "every status of the table provoked once");
}

/// The order of the checks: state before write pointer before capacity.
#[test]
fn checks_run_state_then_write_pointer_then_capacity() {
    let mut z = zones(0, 0);
    z.write(0, CAP).unwrap();
    // A full zone, written off its pointer and past its capacity: the state speaks first.
    assert_eq!(z.write(1, ZONE), Err(ZoneStatus::ZoneIsFull));
    // An open zone, off its pointer and past capacity: the write pointer next.
    z.write(ZONE, 1).unwrap();
    assert_eq!(z.write(ZONE + 5, ZONE), Err(ZoneStatus::ZoneInvalidWrite));
    // At its pointer, past capacity.
    assert_eq!(z.write(ZONE + 1, CAP), Err(ZoneStatus::ZoneBoundaryError));
}

#[test]
fn the_oldest_implicitly_opened_zone_is_closed_at_the_open_limit() {
    let mut z = zones(2, 0);
    z.write(0, 1).unwrap();
    z.write(ZONE, 1).unwrap();
    assert_eq!(state(&z, 0), ZoneState::ImplicitlyOpened);
    z.write(2 * ZONE, 1).unwrap();
    assert_eq!(
        state(&z, 0),
        ZoneState::Closed,
        "the first opened is closed"
    );
    assert_eq!(state(&z, 1), ZoneState::ImplicitlyOpened);
    assert_eq!(state(&z, 2), ZoneState::ImplicitlyOpened);
    assert_eq!(z.open_and_active(), (2, 3));
    // Writing the closed zone reopens it, closing zone 1 now.
    z.write(1, 1).unwrap();
    assert_eq!(state(&z, 0), ZoneState::ImplicitlyOpened);
    assert_eq!(state(&z, 1), ZoneState::Closed);
    z.check_consistency().unwrap();
}

#[test]
fn management_moves_zones_through_the_state_machine() {
    let mut z = zones(0, 0);
    let s = |z: &Zones| state(z, 0);
    z.manage(0, ZoneAction::Open).unwrap();
    assert_eq!(s(&z), ZoneState::ExplicitlyOpened);
    // Closing an open zone with nothing written empties it.
    z.manage(0, ZoneAction::Close).unwrap();
    assert_eq!(s(&z), ZoneState::Empty);
    assert_eq!(
        z.manage(0, ZoneAction::Close),
        Err(ZoneStatus::InvalidZoneStateTransition)
    );
    z.write(0, 4).unwrap();
    z.manage(0, ZoneAction::Close).unwrap();
    assert_eq!(s(&z), ZoneState::Closed);
    z.manage(0, ZoneAction::Finish).unwrap();
    assert_eq!(s(&z), ZoneState::Full);
    assert_eq!(z.descriptor(0).write_pointer, CAP);
    assert_eq!(
        z.manage(0, ZoneAction::Open),
        Err(ZoneStatus::InvalidZoneStateTransition)
    );
    z.manage(0, ZoneAction::Reset).unwrap();
    assert_eq!(s(&z), ZoneState::Empty);
    assert_eq!(z.descriptor(0).write_pointer, 0);
    assert_eq!(z.open_and_active(), (0, 0));
    let report = z.report(0);
    assert_eq!(report.len(), 8);
    assert!(report.iter().all(|d| d.state == ZoneState::Empty));
    assert_eq!(report[3].start_block, 3 * ZONE);
    assert_eq!(ZoneState::Full.code(), 0xE);
}

#[test]
fn zone_append_under_8_writers_writes_every_block_exactly_once() {
    let z = Arc::new(Mutex::new(zones(0, 0)));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let z = Arc::clone(&z);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                // Appends of 1 to 3 blocks to zone 1 until it is full.
                let mut n = 0u64;
                loop {
                    let blocks = 1 + (w + n) % 3;
                    n += 1;
                    match z.lock().unwrap().append(ZONE, blocks) {
                        Ok(at) => got.push((at, blocks)),
                        Err(ZoneStatus::ZoneIsFull) => return got,
                        // Near the end a longer append may not fit; a shorter one still might.
                        Err(ZoneStatus::ZoneBoundaryError) => continue,
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                    if n > 10 * CAP {
                        return got;
                    }
                }
            })
        })
        .collect();
    let mut written = vec![0u32; CAP as usize];
    for w in writers {
        for (at, blocks) in w.join().unwrap() {
            for b in at..at + blocks {
                written[(b - ZONE) as usize] += 1;
            }
        }
    }
    assert!(
        written.iter().all(|&n| n == 1),
        "blocks written other than once: {written:?}"
    );
    let z = z.lock().unwrap();
    assert_eq!(z.descriptor(1).state, ZoneState::Full);
    z.check_consistency().unwrap();
}
