//! The back end driven by a vhost-user front end in-process (`TestVmm`): every request kind
//! against a reference copy of the disk, on several virtqueues; chains no driver should send,
//! each answered alone; a read-only disk; a VMM that leaves with requests in flight, and the
//! next one served; the report's stream per guest.

use std::sync::Arc;
use std::time::Duration;

use nvarray_vhost::client::{TestVmm, DEPTH_MAX};
use nvarray_vhost::request::Descriptor;
use nvarray_vhost::{VhostError, VhostOptions, VhostServer};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT,
};
use vm_memory::Bytes;

mod common;
use common::{Running, BLOCK, SIZE};

#[test]
fn every_request_kind_matches_a_reference_disk_on_several_queues() {
    let r = Running::start(false, 4);
    let mut vmm = TestVmm::connect(&r.socket, 4, 64 * 1024).unwrap();
    assert_eq!(vmm.disk.capacity_bytes, SIZE);
    assert_eq!(vmm.disk.block_bytes as u64, BLOCK);
    assert_eq!(vmm.disk.queues, 4);
    let mut reference = vec![0u8; SIZE as usize];
    let mut rng = SmallRng::seed_from_u64(59);
    for i in 0..400 {
        let q = i % 4;
        let blocks = rng.gen_range(1..=128u64);
        let offset = rng.gen_range(0..SIZE / BLOCK - blocks) * BLOCK;
        let len = (blocks * BLOCK) as usize;
        let at = offset as usize..offset as usize + len;
        match rng.gen_range(0..10) {
            0..=3 => {
                let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                assert_eq!(vmm.write_at(q, offset, &data).unwrap(), 0);
                reference[at].copy_from_slice(&data);
            }
            4..=7 => {
                let (status, data) = vmm.read(q, offset, len as u32).unwrap();
                assert_eq!(status, 0);
                assert!(data == reference[at.clone()], "read {at:?} differs");
            }
            8 => {
                assert_eq!(vmm.ranges(q, true, &[(offset, len as u64)]).unwrap(), 0);
                reference[at].fill(0);
            }
            _ => {
                // Discarded data is the device's to keep or drop: only the status is checked.
                assert_eq!(vmm.ranges(q, false, &[(offset, len as u64)]).unwrap(), 0);
                assert_eq!(vmm.flush(q).unwrap(), 0);
                let (_, now) = vmm.read(q, offset, len as u32).unwrap();
                reference[at].copy_from_slice(&now);
            }
        }
    }
    let (status, id) = vmm.get_id(0).unwrap();
    assert_eq!(status, 0);
    assert_eq!(&id[..12], b"nvarray-test");
    assert!(id[12..].iter().all(|&b| b == 0));
    drop(vmm);
    let line = r.wait_for_log("guest 1 disconnected");
    assert!(line.contains(" 0 refused, 0 failed"), "{line}");
    let report = r.server.report();
    assert_eq!(report.streams.len(), 1);
    assert_eq!(report.streams[0].name, "guest 1");
    assert!(
        report.streams[0].totals.requests >= 400,
        "{:?}",
        report.streams[0].totals.requests
    );
    r.stop();
}

#[test]
fn requests_in_flight_together_are_all_answered() {
    let r = Running::start(false, 1);
    let mut vmm = TestVmm::connect(&r.socket, 1, 64 * 1024).unwrap();
    // A full queue of writes, each a distinct pattern, made available before one kick.
    for slot in 0..DEPTH_MAX {
        let s = vmm.take_slot(0).unwrap();
        let data = vec![slot as u8 + 1; 64 * 1024];
        vmm.write(vmm.data_addr(0, s).0, &data);
        vmm.post(0, s, VIRTIO_BLK_T_OUT, (slot as u64) * 128, 64 * 1024);
    }
    vmm.kick(0).unwrap();
    let mut answered = 0;
    while answered < DEPTH_MAX {
        let got = vmm.wait_answers(0, Duration::from_secs(10)).unwrap();
        assert!(
            got.iter().all(|a| a.status == 0 && a.used_len == 1),
            "{got:?}"
        );
        answered += got.len();
    }
    for slot in 0..DEPTH_MAX {
        let (status, data) = vmm.read(0, slot as u64 * 65536, 65536).unwrap();
        assert_eq!(status, 0);
        assert!(data.iter().all(|&b| b == slot as u8 + 1), "slot {slot}");
    }
    drop(vmm);
    r.stop();
}

#[test]
fn malformed_chains_fail_alone_and_touch_nothing_outside_the_guest() {
    let r = Running::start(false, 1);
    let mut vmm = TestVmm::connect(&r.socket, 1, 64 * 1024).unwrap();
    let mem_end = vmm.memory_bytes();
    let base = vmm.queue_base(0) + 60 * 1024;
    // Each case's header at an address of its own: all are written before the first is sent.
    let next_header = std::cell::Cell::new(base);
    let header = |vmm: &TestVmm, kind: u32, sector: u64| {
        let at = next_header.get() + 16;
        next_header.set(at);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[8..16].copy_from_slice(&sector.to_le_bytes());
        vmm.write(at, &h);
        Descriptor {
            addr: at,
            len: 16,
            writable: false,
        }
    };
    let d = |addr, len, writable| Descriptor {
        addr,
        len,
        writable,
    };
    let status_at = base + 1000;
    let data_at = vmm.data_addr(0, 0).0;
    // (chain, the status the back end must write: None = nothing written)
    let cases: Vec<(Vec<Descriptor>, Option<u32>)> = vec![
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_IN, 0),
                d(mem_end, 4096, true),
                d(status_at, 1, true),
            ],
            None,
        ),
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_IN, 0),
                d(u64::MAX - 10, 4096, true),
                d(status_at, 1, true),
            ],
            None,
        ),
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_IN, 0),
                d(data_at, 0, true),
                d(status_at, 1, true),
            ],
            None,
        ),
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_IN, 0),
                d(data_at, 4096, true),
                d(status_at, 1, false),
            ],
            None,
        ),
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_IN, 0),
                d(data_at, 4096, false),
                d(status_at, 1, true),
            ],
            Some(VIRTIO_BLK_S_IOERR),
        ),
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_OUT, 0),
                d(data_at, 4096, true),
                d(status_at, 1, true),
            ],
            Some(VIRTIO_BLK_S_IOERR),
        ),
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_IN, SIZE / 512),
                d(data_at, 4096, true),
                d(status_at, 1, true),
            ],
            Some(VIRTIO_BLK_S_IOERR),
        ),
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_IN, 1u64 << 60),
                d(data_at, 4096, true),
                d(status_at, 1, true),
            ],
            Some(VIRTIO_BLK_S_IOERR),
        ),
        (
            vec![
                header(&vmm, VIRTIO_BLK_T_IN, 0),
                d(data_at, 100, true),
                d(status_at, 1, true),
            ],
            Some(VIRTIO_BLK_S_IOERR),
        ),
        (
            vec![header(&vmm, 99, 0), d(status_at, 1, true)],
            Some(VIRTIO_BLK_S_UNSUPP),
        ),
    ];
    for (i, (chain, status)) in cases.iter().enumerate() {
        vmm.write(status_at, &[0xee]);
        let head = vmm.post_raw(0, chain);
        vmm.kick(0).unwrap();
        let got = vmm.wait_answers(0, Duration::from_secs(10)).unwrap();
        assert_eq!(got.len(), 1, "case {i}: {got:?}");
        assert_eq!(got[0].head, head);
        let mut byte = [0u8];
        vmm.memory()
            .read_slice(&mut byte, vm_memory::GuestAddress(status_at))
            .unwrap();
        match status {
            Some(s) => {
                assert_eq!(u32::from(byte[0]), *s, "case {i}");
                assert_eq!(got[0].used_len, 1, "case {i}");
            }
            None => {
                assert_eq!(byte[0], 0xee, "case {i}: the status was written");
                assert_eq!(got[0].used_len, 0, "case {i}");
            }
        }
    }
    // A descriptor whose `next` loops back: the chain ends where the ring's size says, and is
    // refused; the queue goes on.
    vmm.post_descriptor_table(0, &[(base, 16, 1, 192)], 192);
    vmm.kick(0).unwrap();
    let got = vmm.wait_answers(0, Duration::from_secs(10)).unwrap();
    assert_eq!(got[0].used_len, 0);
    // The queue still serves good requests.
    assert_eq!(
        vmm.write_at(0, 0, &[7u8; 4096]).unwrap(),
        VIRTIO_BLK_S_OK as u8
    );
    assert_eq!(vmm.read(0, 0, 4096).unwrap().1, vec![7u8; 4096]);
    drop(vmm);
    let line = r.wait_for_log("guest 1 disconnected");
    assert!(
        line.contains(&format!("{} refused", cases.len() + 1)),
        "{line}"
    );
    r.stop();
}

#[test]
fn a_request_naming_the_whole_disk_many_times_is_cut_as_tags_allow() {
    // 32 ranges of the whole disk: 32,768 commands of the 16 KiB buffer, made as tags free.
    let r = Running::start(false, 1);
    let mut vmm = TestVmm::connect(&r.socket, 1, 4096).unwrap();
    assert_eq!(vmm.write_at(0, SIZE - 4096, &[9u8; 4096]).unwrap(), 0);
    let whole = vec![(0, SIZE); 32];
    assert_eq!(vmm.ranges(0, false, &whole).unwrap(), 0);
    assert_eq!(vmm.ranges(0, true, &whole).unwrap(), 0);
    assert_eq!(vmm.read(0, SIZE - 4096, 4096).unwrap().1, vec![0u8; 4096]);
    drop(vmm);
    r.stop();
}

#[test]
fn a_read_only_disk_refuses_every_write() {
    let r = Running::start(true, 1);
    let mut vmm = TestVmm::connect(&r.socket, 1, 4096).unwrap();
    assert_ne!(vmm.disk.features & (1 << 5), 0, "VIRTIO_BLK_F_RO offered");
    assert_eq!(
        vmm.write_at(0, 0, &[1u8; 4096]).unwrap(),
        VIRTIO_BLK_S_IOERR as u8
    );
    assert_eq!(
        vmm.ranges(0, true, &[(0, 4096)]).unwrap(),
        VIRTIO_BLK_S_IOERR as u8
    );
    assert_eq!(
        vmm.ranges(0, false, &[(0, 4096)]).unwrap(),
        VIRTIO_BLK_S_IOERR as u8
    );
    let (status, data) = vmm.read(0, 0, 4096).unwrap();
    assert_eq!(status, 0);
    assert_eq!(data, vec![0u8; 4096]);
    assert_eq!(vmm.flush(0).unwrap(), 0);
    drop(vmm);
    r.stop();
}

#[test]
fn a_vmm_that_leaves_mid_request_frees_its_queues_for_the_next() {
    let r = Running::start(false, 2);
    for round in 1..=3u8 {
        let mut vmm = TestVmm::connect(&r.socket, 2, 64 * 1024).unwrap();
        // The previous VMM's acknowledged write is there.
        if round > 1 {
            let (_, data) = vmm.read(1, 0, 4096).unwrap();
            assert_eq!(data, vec![round - 1; 4096]);
        }
        assert_eq!(vmm.write_at(1, 0, &[round; 4096]).unwrap(), 0);
        // Requests made available and kicked, then the VMM goes without waiting.
        for _ in 0..8 {
            let s = vmm.take_slot(0).unwrap();
            vmm.post(0, s, VIRTIO_BLK_T_IN, 0, 64 * 1024);
        }
        vmm.kick(0).unwrap();
        drop(vmm);
        r.wait_for_log(&format!("guest {round} disconnected"));
    }
    let report = r.server.report();
    assert_eq!(report.streams.len(), 3, "a stream per guest");
    r.stop();
}

#[test]
fn shutdown_ends_a_connected_vmm_and_refuses_a_second_server_on_the_socket() {
    let r = Running::start(false, 1);
    let mut vmm = TestVmm::connect(&r.socket, 1, 4096).unwrap();
    assert_eq!(vmm.flush(0).unwrap(), 0);
    let again = VhostServer::bind(
        Arc::clone(r.server.device()),
        VhostOptions {
            socket: r.socket.clone(),
            read_only: false,
            queues: 1,
            serial: String::new(),
        },
        Arc::new(|_: &str| {}),
    );
    assert!(matches!(again, Err(VhostError::SocketInUse(_))));
    let socket = r.socket.clone();
    r.stop();
    assert!(!socket.exists(), "the socket file is removed");
    assert!(vmm.stop_queues().is_err(), "the connection is closed");
}
