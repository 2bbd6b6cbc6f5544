//! `DiskIo` against a byte array: reads and writes at any offset and length, through the real
//! driver and emulated device (RAM backing), give exactly what a plain file of the device's
//! size would; the end of the file clips reads and refuses writes; nothing panics.

use std::sync::Arc;

use nvarray_fuse::{DiskIo, IoError, IO_BYTES_MAX};
use nvarray_host::{CompletionMode, Device, Options};
use proptest::prelude::*;

/// A small DRAM device (the fastest preset, so the property test runs quickly) with
/// `block_bytes` blocks and tag buffers smaller than `IO_BYTES_MAX`, so large requests are
/// split into several commands.
fn device(size_bytes: u64, block_bytes: u32) -> Arc<Device> {
    let config = nvarray_model::presets::preset("dram")
        .unwrap()
        .load(&[
            ("memory.capacity_bytes".into(), size_bytes.to_string()),
            ("controller.block_bytes".into(), block_bytes.to_string()),
        ])
        .unwrap();
    let options = Options {
        device_threads: 0,
        buffer_bytes: Some(64 * 1024),
        ..Options::default()
    };
    Arc::new(Device::open(&config, &options).unwrap())
}

#[derive(Clone, Debug)]
enum Op {
    Read { offset: u64, len: u32 },
    Write { offset: u64, len: u32, seed: u8 },
}

fn op(size_bytes: u64) -> impl Strategy<Value = Op> {
    // Offsets a little beyond the end too, and lengths from 0 to past IO_BYTES_MAX.
    let offset = prop_oneof![
        0..size_bytes + 4096,
        (0..size_bytes / 512).prop_map(|b| b * 512),
        Just(size_bytes),
        (1u64..5000).prop_map(move |back| size_bytes.saturating_sub(back)),
    ];
    let len = prop_oneof![
        0u32..9000,
        (1u32..64).prop_map(|b| b * 512),
        Just(IO_BYTES_MAX),
    ];
    prop_oneof![
        (offset.clone(), len.clone()).prop_map(|(offset, len)| Op::Read { offset, len }),
        (offset, len, any::<u8>()).prop_map(|(offset, len, seed)| Op::Write { offset, len, seed }),
    ]
}

fn pattern(len: u32, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn check(io: &mut DiskIo, reference: &mut [u8], op: &Op) {
    let size = reference.len() as u64;
    match *op {
        Op::Read { offset, len } => {
            let got = io
                .read(offset, len)
                .expect("reads inside or past the end succeed");
            let start = offset.min(size) as usize;
            let end = (offset.saturating_add(u64::from(len))).min(size) as usize;
            assert_eq!(got.len(), end - start.min(end), "{op:?}: length");
            assert!(got == &reference[start..end.max(start)], "{op:?}: data");
        }
        Op::Write { offset, len, seed } => {
            let data = pattern(len, seed);
            match io.write(offset, &data) {
                Ok(n) => {
                    let fits = size.saturating_sub(offset).min(u64::from(len));
                    assert_eq!(u64::from(n), fits, "{op:?}: written");
                    let at = offset as usize;
                    reference[at..at + n as usize].copy_from_slice(&data[..n as usize]);
                }
                Err(IoError::NoSpace { .. }) => {
                    assert!(offset >= size && len > 0, "{op:?}: NoSpace inside the file");
                }
                Err(e) => panic!("{op:?}: {e}"),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn reads_and_writes_match_a_byte_array(
        block_shift in 9u32..13,
        ops in prop::collection::vec(op(4 << 20), 1..40),
    ) {
        let size = 4u64 << 20;
        let mut io = DiskIo::new(device(size, 1 << block_shift), CompletionMode::Spin);
        let mut reference = vec![0u8; size as usize];
        for op in &ops {
            check(&mut io, &mut reference, op);
        }
        // The whole file reads back as the reference, one maximal read at a time.
        let mut at = 0u64;
        while at < size {
            let got = io.read(at, IO_BYTES_MAX).unwrap().to_vec();
            prop_assert!(got == reference[at as usize..at as usize + got.len()]);
            at += got.len() as u64;
        }
    }
}

#[test]
fn the_end_of_the_file_clips_reads_and_refuses_writes() {
    let size = 1u64 << 20;
    let mut io = DiskIo::new(device(size, 512), CompletionMode::Adaptive);
    assert_eq!(io.size_bytes(), size);
    assert_eq!(io.read(size, 4096).unwrap().len(), 0, "read at the end");
    assert_eq!(io.read(u64::MAX, 4096).unwrap().len(), 0, "read far beyond");
    assert_eq!(io.read(size - 100, 4096).unwrap().len(), 100, "read across");
    assert!(matches!(io.write(size, b"x"), Err(IoError::NoSpace { .. })));
    assert!(matches!(
        io.write(u64::MAX, b"x"),
        Err(IoError::NoSpace { .. })
    ));
    assert_eq!(
        io.write(size - 3, b"abcdef").unwrap(),
        3,
        "short write at the end"
    );
    assert_eq!(io.read(size - 3, 10).unwrap(), b"abc");
    assert_eq!(io.write(0, b"").unwrap(), 0);
    let stats = io.stats();
    assert_eq!(stats.errors, 2);
    assert!(stats
        .last_error
        .as_deref()
        .unwrap()
        .contains("beyond the end"));
    io.fsync().unwrap();
    assert_eq!(io.stats().fsyncs, 1);
}
