//! The PCIe host link: per-direction bandwidth after encoding and TLP overhead, full duplex.
//!
//! Each direction is its own `Timeline`: reads' data, completions and interrupts travel to
//! the host; writes' data, command words and doorbells travel to the device. A DMA read by the
//! device (to fetch write data or an NVMe SQ entry) costs a header-only request towards the
//! host, the host memory's answer time, and the data coming back.

use crate::config::LinkConfig;
use crate::timeline::Timeline;

/// Giga-transfers per second per lane for PCIe generations 1 to 5.
const GIGATRANSFERS_PER_S: [f64; 5] = [2.5, 5.0, 8.0, 16.0, 32.0];

/// Which way bytes travel on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    ToDevice,
    ToHost,
}

/// Raw bytes per second in one direction, after line encoding (8b/10b for generations 1 and
/// 2, 128b/130b from generation 3), before TLP overhead. PCIe 1.1 x8 gives 2 GB/s
/// (Moneta talk: "two gigabytes in each direction").
pub fn raw_bytes_per_s(generation: u8, lanes: u8) -> f64 {
    let gt = GIGATRANSFERS_PER_S[usize::from(generation.clamp(1, 5)) - 1];
    let encoding = if generation <= 2 {
        8.0 / 10.0
    } else {
        128.0 / 130.0
    };
    gt * 1e9 * encoding / 8.0 * f64::from(lanes)
}

/// Bytes on the wire for `payload_bytes` split into TLPs of at most `max_payload_bytes`.
/// A transfer of zero bytes is one header-only TLP.
pub fn wire_bytes(payload_bytes: u64, max_payload_bytes: u32, overhead_bytes: u32) -> u64 {
    let tlps = payload_bytes.div_ceil(u64::from(max_payload_bytes)).max(1);
    payload_bytes + tlps * u64::from(overhead_bytes)
}

/// Converts a byte count to nanoseconds at a rate given in femtoseconds per byte (rounded up,
/// so a transfer never takes zero time).
#[inline]
pub fn bytes_to_ns(bytes: u64, fs_per_byte: u64) -> u64 {
    // The 64-bit path covers every transfer the model accepts (up to 64 MiB at 1 MB/s); the
    // 128-bit division is a library call that would dominate the simulator's profile.
    match bytes.checked_mul(fs_per_byte) {
        Some(fs) => fs.div_ceil(1_000_000),
        None => (u128::from(bytes) * u128::from(fs_per_byte)).div_ceil(1_000_000) as u64,
    }
}

/// Femtoseconds per byte for a bandwidth in bytes per second.
pub fn fs_per_byte(bytes_per_s: f64) -> u64 {
    (1e15 / bytes_per_s).round().max(1.0) as u64
}

#[derive(Clone, Debug)]
pub struct Link {
    to_device: Timeline,
    to_host: Timeline,
    fs_per_byte: u64,
    max_payload_bytes: u32,
    overhead_bytes: u32,
    max_read_request_bytes: u32,
    pub propagation_ns: u64,
    pub host_read_latency_ns: u64,
}

impl Link {
    pub fn new(cfg: &LinkConfig) -> Self {
        Link {
            to_device: Timeline::new(),
            to_host: Timeline::new(),
            fs_per_byte: fs_per_byte(raw_bytes_per_s(cfg.generation, cfg.lanes)),
            max_payload_bytes: cfg.max_payload_bytes,
            overhead_bytes: cfg.tlp_overhead_bytes,
            max_read_request_bytes: cfg.max_read_request_bytes,
            propagation_ns: cfg.propagation_ns,
            host_read_latency_ns: cfg.host_read_latency_ns,
        }
    }

    fn timeline(&mut self, dir: Direction) -> &mut Timeline {
        match dir {
            Direction::ToDevice => &mut self.to_device,
            Direction::ToHost => &mut self.to_host,
        }
    }

    /// Sends `payload_bytes` (0 for a header-only TLP) once it is ready; returns
    /// `(start, arrival)`: when the first byte left and when the last byte arrived.
    pub fn send(
        &mut self,
        dir: Direction,
        now_ns: u64,
        ready_ns: u64,
        payload_bytes: u64,
    ) -> (u64, u64) {
        let wire = wire_bytes(payload_bytes, self.max_payload_bytes, self.overhead_bytes);
        let duration = bytes_to_ns(wire, self.fs_per_byte);
        let start = self.timeline(dir).reserve(now_ns, ready_ns, duration);
        (start, start + duration + self.propagation_ns)
    }

    /// The device reads `bytes` of host memory by DMA: read requests go to the host, the host
    /// memory answers, completions carry the data to the device. Returns `(start, arrival)`.
    pub fn device_reads_host(&mut self, now_ns: u64, ready_ns: u64, bytes: u64) -> (u64, u64) {
        let requests = bytes
            .div_ceil(u64::from(self.max_read_request_bytes))
            .max(1);
        let request_wire = requests * u64::from(self.overhead_bytes);
        let request_ns = bytes_to_ns(request_wire, self.fs_per_byte);
        let start = self.to_host.reserve(now_ns, ready_ns, request_ns);
        // The first request reaches host memory one propagation later; data flows back as
        // soon as the host answers, overlapping the remaining requests.
        let first_request_arrival = start
            + bytes_to_ns(u64::from(self.overhead_bytes), self.fs_per_byte)
            + self.propagation_ns;
        let data_ready = first_request_arrival + self.host_read_latency_ns;
        let (_, arrival) = self.send(Direction::ToDevice, now_ns, data_ready, bytes);
        (start, arrival)
    }

    /// Payload bandwidth of one direction for long transfers, after all overheads.
    pub fn usable_bytes_per_s(&self) -> f64 {
        let payload = u64::from(self.max_payload_bytes);
        let wire = wire_bytes(payload, self.max_payload_bytes, self.overhead_bytes);
        1e15 / self.fs_per_byte as f64 * payload as f64 / wire as f64
    }

    pub fn busy_ns_total(&self, dir: Direction) -> u64 {
        match dir {
            Direction::ToDevice => self.to_device.busy_ns_total(),
            Direction::ToHost => self.to_host.busy_ns_total(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_generations_have_their_published_rates() {
        // (generation, lanes, GB/s per direction after line encoding)
        for (generation, lanes, gb_per_s) in [
            (1, 8, 2.0),
            (2, 4, 2.0),
            (3, 4, 3.938),
            (4, 4, 7.877),
            (5, 16, 63.015),
        ] {
            let got = raw_bytes_per_s(generation, lanes) / 1e9;
            assert!(
                (got - gb_per_s).abs() < 0.01,
                "gen{generation} x{lanes}: {got} GB/s, expected {gb_per_s}"
            );
        }
    }

    #[test]
    fn tlp_overhead_takes_pcie_1_1_x8_to_about_1_7_gb_per_s() {
        // Moneta: "tops out at about 1.7 gigabytes a second ... the PCIe bandwidth minus the
        // PCIe overhead" with 128-byte payloads.
        let cfg = LinkConfig {
            generation: 1,
            lanes: 8,
            max_payload_bytes: 128,
            tlp_overhead_bytes: 24,
            max_read_request_bytes: 512,
            propagation_ns: 0,
            host_read_latency_ns: 0,
        };
        let usable = Link::new(&cfg).usable_bytes_per_s() / 1e9;
        assert!((1.6..1.75).contains(&usable), "{usable} GB/s");
    }

    #[test]
    fn directions_are_independent() {
        let cfg = LinkConfig {
            generation: 1,
            lanes: 1,
            max_payload_bytes: 128,
            tlp_overhead_bytes: 0,
            max_read_request_bytes: 512,
            propagation_ns: 100,
            host_read_latency_ns: 0,
        };
        let mut link = Link::new(&cfg);
        // 250 MB/s: 4 ns per byte.
        let (s1, a1) = link.send(Direction::ToHost, 0, 0, 1000);
        let (s2, a2) = link.send(Direction::ToDevice, 0, 0, 1000);
        let (s3, _) = link.send(Direction::ToHost, 0, 0, 1000);
        assert_eq!((s1, a1), (0, 4100));
        assert_eq!(
            (s2, a2),
            (0, 4100),
            "full duplex: the other direction is free"
        );
        assert_eq!(s3, 4000, "same direction queues");
    }

    #[test]
    fn wire_bytes_counts_one_header_per_tlp() {
        assert_eq!(wire_bytes(0, 128, 24), 24);
        assert_eq!(wire_bytes(8, 128, 24), 32);
        assert_eq!(wire_bytes(128, 128, 24), 152);
        assert_eq!(wire_bytes(129, 128, 24), 129 + 48);
        assert_eq!(wire_bytes(4096, 128, 24), 4096 + 32 * 24);
    }
}
