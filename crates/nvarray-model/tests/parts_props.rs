//! Properties of the model's parts driven directly, below the device: the memory array
//! (address mapping, banks, start-gap, erase, disks) and the PCIe link (packets, wire bytes,
//! per-direction booking, DMA reads).
//!
//! In a debug build these runs also check every `debug_assert!` on the parts' hot paths
//! (bookings, address mapping, lockstep, packet counts), over shapes the presets alone do
//! not reach: odd controller and bank counts, unaligned accesses, rows, stripes and lines of
//! every size the configuration allows.

use nvarray_model::config::{DeviceConfig, LinkConfig};
use nvarray_model::link::{bytes_to_ns, fs_per_byte, raw_bytes_per_s, Carries, Direction, Link};
use nvarray_model::memory::{Access, Memory};
use nvarray_model::presets::PRESETS;
use proptest::prelude::*;

/// A valid device config from preset `preset` with the memory reshaped: `controllers`,
/// `banks`, rows of `1 << row_shift` bytes, stripes and wear lines a power of two larger,
/// and a capacity a power of two of whole stripes and lines per controller.
fn reshaped(
    preset: usize,
    (controllers, banks, row_shift, stripe_shift, line_shift, size_shift, wear): (
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        bool,
    ),
) -> DeviceConfig {
    let p = &PRESETS[preset % PRESETS.len()];
    let base = p.load(&[]).expect("valid preset");
    let is_disk = base.memory.disk.is_some();
    let row = 1u64 << row_shift;
    let stripe = row << stripe_shift;
    let line = row.max(64) << line_shift;
    let capacity = (u64::from(controllers) * stripe.max(line)) << size_shift;
    let mut overrides: Vec<(String, String)> = vec![
        ("memory.controllers".into(), controllers.to_string()),
        ("memory.row_bytes".into(), row.to_string()),
        ("memory.stripe_bytes".into(), stripe.to_string()),
        ("wear.line_bytes".into(), line.to_string()),
        ("memory.capacity_bytes".into(), capacity.to_string()),
        // Small enough for any capacity above.
        ("controller.buffer_bytes".into(), "4096".into()),
        ("controller.block_bytes".into(), "512".into()),
        ("controller.max_transfer_bytes".into(), "4096".into()),
    ];
    if !is_disk {
        // A disk has one actuator per controller and is not wear-levelled.
        overrides.push(("memory.banks_per_controller".into(), banks.to_string()));
        overrides.push(("wear.enabled".into(), wear.to_string()));
        overrides.push(("wear.gap_interval_writes".into(), "3".into()));
    }
    if base.memory.erase_latency_ns > 0 {
        // Erase blocks of a few rows, so erases happen often.
        overrides.push(("memory.erase_block_bytes".into(), (row << 2).to_string()));
    }
    p.load(&overrides)
        .unwrap_or_else(|e| panic!("{}: {e} with {overrides:?}", p.name))
}

fn shape() -> impl Strategy<Value = (u32, u32, u32, u32, u32, u32, bool)> {
    (
        1u32..10,
        1u32..7,
        6u32..13,
        0u32..4,
        0u32..4,
        6u32..10,
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Every access, anywhere in the capacity and of any length, books media that starts no
    /// earlier than it was ready and takes time; on idle media it starts right away; bank
    /// time only grows.
    #[test]
    fn memory_accesses_book_the_media_they_ask_for(
        preset in 0usize..32,
        shape in shape(),
        ops in proptest::collection::vec(
            (0u64..50_000, 0u64..5_000, any::<bool>(), any::<u64>(), 1u64..70_000),
            1..60,
        ),
    ) {
        let cfg = reshaped(preset, shape);
        let mut memory = Memory::new(&cfg.memory, &cfg.wear, &cfg.ftl);
        let capacity = cfg.memory.capacity_bytes;
        let mut now = 0u64;
        let mut end_max = 0u64;
        let mut busy_before = memory.bank_busy_ns_total().0;
        for (advance, delay, read, where_, len) in ops {
            now += advance;
            let ready = now + delay;
            let offset = where_ % capacity;
            let len = len.min(capacity - offset);
            let access = if read { Access::Read } else { Access::Write };
            let (first, last) = memory.access(now, ready, access, offset, len);
            prop_assert!(first >= ready, "first start {first} before ready {ready}");
            prop_assert!(last > first, "[{first}, {last}) took no time");
            if now >= end_max {
                prop_assert_eq!(first, ready, "idle media made the access wait");
            }
            end_max = end_max.max(last);
            let busy = memory.bank_busy_ns_total().0;
            prop_assert!(busy > busy_before, "bank time did not grow: {busy_before} -> {busy}");
            busy_before = busy;
        }
        if let Some(wear) = memory.wear_stats() {
            prop_assert!(wear.line_writes_mean <= wear.line_writes_max as f64);
        }
    }
}

/// The earliest start `>= ready` of length `duration` that overlaps none of `booked`. An
/// empty booking overlaps nothing, so it starts when ready: with `link.tlp_overhead_bytes = 0`
/// (no preset has it) a header-only TLP is zero bytes on the wire and passes a busy link.
fn reference_start(booked: &[(u64, u64)], ready: u64, duration: u64) -> u64 {
    if duration == 0 {
        return ready;
    }
    let mut start = ready;
    loop {
        match booked
            .iter()
            .find(|&&(s, e)| start < e && s < start + duration)
        {
            Some(&(_, e)) => start = e,
            None => return start,
        }
    }
}

/// A plain model of one link: every booking of each direction kept in a list, packets
/// counted from the definition.
struct ReferenceLink {
    cfg: LinkConfig,
    fs_per_byte: u64,
    booked: [Vec<(u64, u64)>; 2],
    /// Per direction: (packets, wire bytes).
    traffic: [(u64, u64); 2],
}

impl ReferenceLink {
    fn new(cfg: &LinkConfig) -> Self {
        ReferenceLink {
            cfg: cfg.clone(),
            fs_per_byte: fs_per_byte(raw_bytes_per_s(cfg.generation, cfg.lanes)),
            booked: [Vec::new(), Vec::new()],
            traffic: [(0, 0); 2],
        }
    }

    /// Books `packets` TLPs carrying `payload` bytes in all; returns (start, end on the wire).
    fn book(&mut self, dir: Direction, ready: u64, packets: u64, payload: u64) -> (u64, u64) {
        let wire = payload + packets * u64::from(self.cfg.tlp_overhead_bytes);
        let t = &mut self.traffic[dir as usize];
        t.0 += packets;
        t.1 += wire;
        let duration = bytes_to_ns(wire, self.fs_per_byte);
        let booked = &mut self.booked[dir as usize];
        let start = reference_start(booked, ready, duration);
        if duration > 0 {
            booked.push((start, start + duration));
        }
        (start, start + duration)
    }

    fn packets(payload: u64, per_packet: u32) -> u64 {
        let per_packet = u64::from(per_packet);
        let mut packets = 1;
        while packets * per_packet < payload {
            packets += 1;
        }
        packets
    }

    fn send(&mut self, dir: Direction, ready: u64, payload: u64) -> (u64, u64) {
        let packets = Self::packets(payload, self.cfg.max_payload_bytes);
        let (start, end) = self.book(dir, ready, packets, payload);
        (start, end + self.cfg.propagation_ns)
    }

    /// (request start, data ready, data start, arrival).
    fn dma_read(&mut self, ready: u64, bytes: u64) -> (u64, u64, u64, u64) {
        let requests = Self::packets(bytes, self.cfg.max_read_request_bytes);
        let (start, _) = self.book(Direction::ToHost, ready, requests, 0);
        let first_arrival = start
            + bytes_to_ns(u64::from(self.cfg.tlp_overhead_bytes), self.fs_per_byte)
            + self.cfg.propagation_ns;
        let data_ready = first_arrival + self.cfg.host_read_latency_ns;
        let (data_start, arrival) = self.send(Direction::ToDevice, data_ready, bytes);
        (start, data_ready, data_start, arrival)
    }
}

fn link_config() -> impl Strategy<Value = LinkConfig> {
    (
        1u8..6,
        1u8..17,
        6u32..13,
        0u32..129,
        6u32..13,
        0u64..2_000,
        0u64..2_000,
    )
        .prop_map(
            |(generation, lanes, payload_shift, overhead, request_shift, propagation, host)| {
                LinkConfig {
                    generation,
                    lanes,
                    max_payload_bytes: 1 << payload_shift,
                    tlp_overhead_bytes: overhead,
                    max_read_request_bytes: 1 << request_shift,
                    propagation_ns: propagation,
                    host_read_latency_ns: host,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The link books each direction where a plain list of its bookings says, counts the
    /// packets and wire bytes of the definition, and a DMA read's times follow each other.
    #[test]
    fn the_link_matches_a_reference(
        cfg in link_config(),
        ops in proptest::collection::vec(
            (0u64..3_000, 0u64..3_000, 0u8..3, any::<bool>(), 0u64..20_000),
            1..80,
        ),
    ) {
        let mut link = Link::new(&cfg);
        let mut reference = ReferenceLink::new(&cfg);
        let mut now = 0u64;
        for (advance, delay, kind, data, bytes) in ops {
            now += advance;
            let ready = now + delay;
            let carries = if data { Carries::Data } else { Carries::Protocol };
            match kind {
                0 | 1 => {
                    let dir = if kind == 0 { Direction::ToHost } else { Direction::ToDevice };
                    let got = link.send(dir, carries, now, ready, bytes);
                    prop_assert_eq!(got, reference.send(dir, ready, bytes));
                    prop_assert!(got.0 >= ready);
                }
                _ => {
                    let dma = link.device_reads_host(carries, now, ready, bytes);
                    let got = (dma.start_ns, dma.data_ready_ns, dma.data_start_ns, dma.arrival_ns);
                    prop_assert_eq!(got, reference.dma_read(ready, bytes));
                    prop_assert!(got.0 >= ready && got.0 <= got.1 && got.1 <= got.2 && got.2 <= got.3);
                }
            }
        }
        for dir in [Direction::ToDevice, Direction::ToHost] {
            let total = link.traffic(dir).total();
            let (packets, wire) = reference.traffic[dir as usize];
            prop_assert_eq!((total.packets, total.wire_bytes), (packets, wire));
            prop_assert!(total.wire_bytes >= total.packets * u64::from(cfg.tlp_overhead_bytes));
        }
    }
}
