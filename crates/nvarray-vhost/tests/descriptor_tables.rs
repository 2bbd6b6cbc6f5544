//! 10^6 random virtqueues (descriptor tables, available rings, headers) from seeded bytes,
//! each chain taken and judged as the back end does it (`descriptor_table::Tables::judge`):
//! none may panic, and everything accepted lies inside the guest and the disk. Half the tables
//! are raw random bytes (nearly every chain broken), half are shaped like a driver's, with
//! one field in a few made wrong (so the checks of well-formed requests run too). The fuzz
//! target `vhost_chain` (in `fuzz/`) drives the same function with libFuzzer's bytes.

use nvarray_vhost::descriptor_table::{Judged, Tables, TABLE_BYTES};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// Tables judged; `NVARRAY_VHOST_TABLES` sets another count.
fn tables() -> u64 {
    std::env::var("NVARRAY_VHOST_TABLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// Where the shaped tables' headers and buffers lie (the table's header area, `HEADERS`).
const HEADERS: u64 = 0x4000;

/// A table of three-descriptor requests (header, data, status) as a driver makes them, with
/// about one field in eight replaced by a random one.
fn shaped(rng: &mut SmallRng, bytes: &mut [u8]) {
    rng.fill_bytes(bytes);
    let wild = |rng: &mut SmallRng, v: u64| if rng.gen_ratio(1, 8) { rng.gen() } else { v };
    for i in 0..16u64 {
        let (request, part) = (i / 3, i % 3);
        let base = HEADERS + request * 64;
        let (addr, len, flags): (u64, u32, u16) = match part {
            0 => (base, 16, 1),
            1 => (
                0x8000 + request * 0x1000,
                [512u32, 1024, 4096][rng.gen_range(0..3)],
                1 | if rng.gen() { 2 } else { 0 },
            ),
            _ => (base + 16, 1, 2),
        };
        let e = &mut bytes[16 * i as usize..16 * i as usize + 16];
        // Addresses with the top bit clear are taken modulo the guest's span.
        e[0..8].copy_from_slice(&(wild(rng, addr) & !(1 << 63)).to_le_bytes());
        e[8..12].copy_from_slice(&(wild(rng, u64::from(len)) as u32 & 0x7fff_ffff).to_le_bytes());
        e[12..14].copy_from_slice(&(wild(rng, u64::from(flags)) as u16).to_le_bytes());
        e[14..16].copy_from_slice(&(wild(rng, i + 1) as u16).to_le_bytes());
    }
    let ring = 16 * 16;
    bytes[ring] = 5;
    bytes[ring + 1] = 0;
    for k in 0..16usize {
        let head = wild(rng, 3 * (k as u64 % 5)) as u16;
        bytes[ring + 2 + 2 * k..ring + 4 + 2 * k].copy_from_slice(&head.to_le_bytes());
    }
    let headers = ring + 34;
    for r in 0..5usize {
        let at = headers + 64 * r;
        let kind = [0u64, 1, 4, 8, 11, 13][rng.gen_range(0..6)];
        let kind = wild(rng, kind) as u32;
        bytes[at..at + 4].copy_from_slice(&kind.to_le_bytes());
        let sector = rng.gen_range(0..2100);
        bytes[at + 8..at + 16].copy_from_slice(&wild(rng, sector).to_le_bytes());
    }
}

#[test]
fn a_million_random_descriptor_tables_are_judged_without_a_fault() {
    let mut rng = SmallRng::seed_from_u64(59);
    let mut bytes = vec![0u8; TABLE_BYTES];
    let mut tables_ = Tables::new();
    let (mut raw, mut driver) = (Judged::default(), Judged::default());
    let n = tables();
    for t in 0..n {
        let total = if t % 2 == 0 {
            rng.fill_bytes(&mut bytes);
            &mut raw
        } else {
            shaped(&mut rng, &mut bytes);
            &mut driver
        };
        let j = tables_.judge(&bytes);
        total.taken += j.taken;
        total.refused += j.refused;
    }
    eprintln!("{n} tables: raw {raw:?}, shaped like a driver's {driver:?}");
    assert!(raw.refused > 0, "{raw:?}");
    // Shaped tables make well-formed requests and broken ones: both paths ran.
    assert!(
        driver.taken > n as usize / 10 && driver.refused > n as usize / 10,
        "{driver:?}"
    );
}
