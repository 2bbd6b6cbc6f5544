//! A channel end to end: data moves, errors come back as statuses, grants hold, a bad
//! client fails its own commands only.

mod common;

use common::{my_uid, whole_device, Running, SIZE_BYTES};
use nvarray_channel::layout::{SqEntry, OP_READ, OP_WRITE, SQ_TAIL};
use nvarray_channel::{Channel, ChannelError, ChannelStatus, Op};
use std::sync::atomic::Ordering;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn what_a_channel_writes_it_reads_back_and_the_report_counts_it() {
    let d = Running::start(whole_device());
    let mut ch = Channel::open(&d.socket).unwrap();
    let g = *ch.geometry();
    assert_eq!(g.size_bytes, SIZE_BYTES);
    // Larger than one command and than the staging region's slots: split and pipelined.
    let data = pattern(7, 1 << 20);
    ch.write(&data, 4096 * 3).unwrap();
    let mut back = vec![0u8; data.len()];
    ch.read(&mut back, 4096 * 3).unwrap();
    assert!(back == data, "read back differs");
    ch.flush().unwrap();
    // The device holds it: read through the driver, not the channel.
    let mut qp = d.device.queue_pair(nvarray_host::CompletionMode::Spin);
    let mut direct = vec![0u8; 4096];
    qp.read_at(&d.device, &mut direct, 4096 * 3).unwrap();
    assert_eq!(direct[..], data[..4096]);
    drop(ch);
    let report = d.daemon.report();
    let counts = report.channels.unwrap();
    assert_eq!((counts.opened, counts.refused), (1, 0));
    let requests: u64 = report.streams.iter().map(|s| s.totals.requests).sum();
    let commands = 2 * (1 << 20) / u64::from(g.command_bytes_max);
    assert_eq!(requests, commands, "one request per command moved");
    assert!(report.streams[0]
        .name
        .starts_with(&format!("pid {}", std::process::id())));
    d.stop();
}

#[test]
fn device_errors_come_back_as_statuses_and_touch_nothing() {
    let d = Running::start(whole_device());
    let mut ch = Channel::open(&d.socket).unwrap();
    let e = ch.read(&mut [0u8; 4096], SIZE_BYTES).unwrap_err();
    assert!(
        matches!(
            e,
            ChannelError::Command {
                status: ChannelStatus::OutOfRange,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.errno(), libc::ERANGE);
    let e = ch.write(&[1u8; 100], 0).unwrap_err();
    assert!(
        matches!(
            e,
            ChannelError::Command {
                status: ChannelStatus::Misaligned,
                ..
            }
        ),
        "{e}"
    );
    // Asynchronous: a buffer outside the region is refused before it is sent.
    let outside = ch.geometry().buffer_bytes;
    assert_eq!(
        ch.submit(Op::Read, 0, 4096, outside, 1),
        Err(nvarray_channel::SubmitError::OutsideRegion)
    );
    // Raw entries the library never writes: the device refuses each, counting them.
    let bad = [
        (
            SqEntry {
                op: 9,
                id: 0,
                offset: 0,
                len: 4096,
                reserved: 0,
                buf: 0,
            },
            ChannelStatus::BadOpcode,
        ),
        (
            SqEntry {
                op: OP_READ,
                id: 1,
                offset: 0,
                len: 4096,
                reserved: 0,
                buf: outside,
            },
            ChannelStatus::BadField,
        ),
        (
            SqEntry {
                op: OP_WRITE,
                id: 2,
                offset: 0,
                len: 4096,
                reserved: 0,
                buf: u64::MAX - 10,
            },
            ChannelStatus::BadField,
        ),
        (
            // A zone command on a device without zones.
            SqEntry {
                op: nvarray_channel::layout::OP_ZONE_RESET,
                id: 3,
                offset: 0,
                len: 0,
                reserved: 0,
                buf: 0,
            },
            ChannelStatus::BadOpcode,
        ),
    ];
    for (entry, _) in &bad {
        ch.push_raw(*entry);
    }
    // Their ids are not ones the library has in flight: it counts them as strays.
    while ch.stray_completions < bad.len() as u64 {
        ch.poll(|_| {});
    }
    assert_eq!(d.daemon.counts().malformed, 2 + bad.len() as u64);
    let mut zero = vec![1u8; 4096];
    ch.read(&mut zero, 0).unwrap();
    assert!(zero.iter().all(|&b| b == 0), "a refused write changed data");
    // The client's zone calls on a device without zones: refused as unknown operations.
    let unknown = |r: Result<(), ChannelError>| {
        matches!(
            r,
            Err(ChannelError::Command {
                status: ChannelStatus::BadOpcode,
                ..
            })
        )
    };
    assert!(unknown(ch.report_zones(0, 8).map(|_| ())));
    assert!(unknown(ch.zone_manage(Op::ZoneReset, 0, |_| {})));
    d.stop();
}

#[test]
fn commands_outside_the_grants_fail_and_change_nothing_and_a_revocation_is_at_once() {
    let uid = my_uid();
    let grants = vec![
        format!("rw:0:1m:rw:{uid}").parse().unwrap(),
        format!("ro:1m:1m:r:{uid}").parse().unwrap(),
        "other:2m:1m:rw:4242424".parse().unwrap(),
    ];
    let d = Running::start(grants);
    let mut ch = Channel::open_with(&d.socket, 64, 0).unwrap();
    ch.write(&pattern(1, 1 << 20), 0).unwrap();
    let denied = |r: Result<(), ChannelError>| {
        matches!(
            r,
            Err(ChannelError::Command {
                status: ChannelStatus::PermissionDenied,
                ..
            })
        )
    };
    assert!(
        denied(ch.write(&[5u8; 4096], 1 << 20)),
        "write to a read-only grant"
    );
    assert!(
        denied(ch.read(&mut [0u8; 4096], 2 << 20)),
        "another user's grant"
    );
    assert!(
        denied(ch.write(&[5u8; 8192], (1 << 20) - 4096)),
        "across a grant's end"
    );
    // 10^6 commands outside the grant, 64 in flight at a time: every one fails.
    let (n, mut failed) = (1_000_000u64, 0u64);
    let mut sent = 0u64;
    while failed < n {
        while sent < n
            && ch
                .submit(Op::Write, (2 << 20) + (sent % 256) * 4096, 4096, 0, sent)
                .is_ok()
        {
            sent += 1;
        }
        ch.wait(1, |c| {
            assert_eq!(c.status, ChannelStatus::PermissionDenied);
            failed += 1;
        })
        .unwrap();
    }
    // Nothing outside the writable grant changed: the whole device read back.
    let mut all = vec![0u8; SIZE_BYTES as usize];
    let mut qp = d.device.queue_pair(nvarray_host::CompletionMode::Spin);
    qp.read_at(&d.device, &mut all, 0).unwrap();
    assert!(all[..1 << 20] == pattern(1, 1 << 20)[..]);
    assert!(
        all[1 << 20..].iter().all(|&b| b == 0),
        "a denied command changed data"
    );
    assert!(d.daemon.counts().permission_denied >= n + 3);
    // Revoked: the very next command fails.
    d.daemon.set_grants(Vec::new()).unwrap();
    assert!(denied(ch.read(&mut [0u8; 4096], 0)));
    // And a new channel is refused outright.
    let e = Channel::open(&d.socket).err().unwrap();
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    d.stop();
}

#[test]
fn a_client_that_breaks_its_ring_stalls_alone() {
    let d = Running::start(whole_device());
    let bad = Channel::open(&d.socket).unwrap();
    let mut good = Channel::open(&d.socket).unwrap();
    // A tail far past the head: impossible, so the device takes nothing from that channel.
    bad.region()
        .word(SQ_TAIL)
        .store(0x8000_0000, Ordering::Release);
    let data = pattern(3, 256 << 10);
    for round in 0..20u64 {
        good.write(&data, round * (256 << 10)).unwrap();
    }
    let mut back = vec![0u8; data.len()];
    good.read(&mut back, 19 * (256 << 10)).unwrap();
    assert!(back == data);
    assert!(d.daemon.counts().ring_faults >= 1);
    drop(bad);
    d.stop();
}

/// Connections that never say hello, or trickle it, hold up no new client (issue 55: the
/// hello was read one connection at a time, blocking, with a 2 s timeout each byte restarted,
/// so three silent connections cost a client 6 s and one sending a byte every 1.9 s held
/// every new client for 45 s). With 200 silent connections and a trickling one open, a new
/// client gets its channel in under 50 ms (the best of three, so that one pause of this
/// shared machine does not decide it); the trickling one is closed by its whole-hello deadline
/// however it trickles, and the silent ones beyond their user's budget at once, each counted.
#[test]
fn silent_and_trickling_connections_hold_up_no_new_client() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};
    let d = Running::start(whole_device());
    let silent: Vec<UnixStream> = (0..200)
        .map(|_| UnixStream::connect(&d.socket).unwrap())
        .collect();
    let mut drip = UnixStream::connect(&d.socket).unwrap();
    drip.write_all(&[1]).unwrap();
    let best = (0..3)
        .map(|_| {
            let started = Instant::now();
            let ch = Channel::open(&d.socket).unwrap();
            let took = started.elapsed();
            drop(ch);
            took
        })
        .min()
        .unwrap();
    assert!(
        best < Duration::from_millis(50),
        "a new client waited {best:?} for its channel"
    );
    // The trickle goes on; the daemon closes it 2 s after its accept all the same (a read
    // that returns end of file; bounded, so a daemon that never closes it fails here).
    drip.write_all(&[1]).unwrap();
    drip.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        drip.read(&mut byte).unwrap(),
        0,
        "the trickling one was not closed"
    );
    let counts = d.daemon.counts();
    assert_eq!(counts.opened, 3);
    // 201 connections from one user with 16 waiting at most: 185 crowded out at once, and
    // the trickling one out of time.
    assert!(counts.refused >= 186, "{counts:?}");
    drop(silent);
    d.stop();
}
