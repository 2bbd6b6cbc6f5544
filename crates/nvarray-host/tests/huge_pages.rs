//! A memory backing on explicit huge pages (`MAP_HUGETLB`): taken when the administrator has
//! reserved enough for the whole device, with transparent huge pages as the fallback, and
//! the device's data intact either way. Its own test binary, so no other test's device can
//! take the pages reserved here (cargo runs test binaries one after another).

use std::fs;

use nvarray_host::{BackingPages, CompletionMode, Device, Options};
use nvarray_model::presets::preset;

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";
const SIZE: u64 = 16 << 20;

fn open() -> Device {
    let config = preset("dram")
        .unwrap()
        .load(&[("memory.capacity_bytes".into(), SIZE.to_string())])
        .unwrap();
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    Device::open(&config, &options).unwrap()
}

/// Writes a pattern over the whole device and reads it back.
fn round_trip(device: &Device) {
    let mut qp = device.queue_pair(CompletionMode::Spin);
    let pattern: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    qp.write_at(device, &pattern, 0).unwrap();
    let mut back = vec![0u8; SIZE as usize];
    qp.read_at(device, &mut back, 0).unwrap();
    assert!(
        back == pattern,
        "the device returned other data than written"
    );
}

/// Restores the system's huge page reservation however the test ends.
struct Reservation(String);

impl Drop for Reservation {
    fn drop(&mut self) {
        let _ = fs::write(NR_HUGEPAGES, &self.0);
    }
}

#[test]
fn a_device_takes_reserved_huge_pages_and_falls_back_without_them() {
    let before = fs::read_to_string(NR_HUGEPAGES).expect("read nr_hugepages");
    let reserved: u64 = before.trim().parse().unwrap();
    let free_before: u64 =
        fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    // Without free explicit pages for the whole device: transparent huge pages.
    if free_before * (2 << 20) < SIZE {
        let device = open();
        assert_eq!(device.backing_pages(), BackingPages::Transparent);
        round_trip(&device);
    }
    // Reserve what the device needs (the test command runs as root).
    let _restore = Reservation(before.clone());
    let wanted = reserved + SIZE / (2 << 20);
    fs::write(NR_HUGEPAGES, wanted.to_string()).expect("reserve huge pages (run as root)");
    let got: u64 = fs::read_to_string(NR_HUGEPAGES)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        got, wanted,
        "the kernel reserved {got} of {wanted} huge pages: too little contiguous memory"
    );
    let device = open();
    assert_eq!(device.backing_pages(), BackingPages::Huge2M);
    round_trip(&device);
}
