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

/// What a transfer carries: the request's data (and the read requests that fetch it), or the
/// protocol around it (command, doorbell, queue entry, PRP list, completion, interrupt,
/// status). The split is what DC Express's "minimizes number of packets per command" is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carries {
    Data,
    Protocol,
}

/// Packets (TLPs) and bytes on the wire, headers included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    pub packets: u64,
    pub wire_bytes: u64,
}

impl Traffic {
    fn add(&mut self, packets: u64, wire_bytes: u64) {
        debug_assert!(
            packets >= 1,
            "traffic without a packet: expected at least 1, found 0 ({wire_bytes} wire bytes)"
        );
        self.packets += packets;
        self.wire_bytes += wire_bytes;
    }

    pub fn plus(self, other: Traffic) -> Traffic {
        Traffic {
            packets: self.packets + other.packets,
            wire_bytes: self.wire_bytes + other.wire_bytes,
        }
    }
}

/// Everything one direction of the link has carried, by what it carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirectionTraffic {
    pub data: Traffic,
    pub protocol: Traffic,
}

impl DirectionTraffic {
    pub fn total(&self) -> Traffic {
        self.data.plus(self.protocol)
    }

    fn of(&mut self, carries: Carries) -> &mut Traffic {
        match carries {
            Carries::Data => &mut self.data,
            Carries::Protocol => &mut self.protocol,
        }
    }
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
    payload_bytes + tlps(payload_bytes, max_payload_bytes) * u64::from(overhead_bytes)
}

/// TLPs needed for `payload_bytes` at `max_payload_bytes` each (one for zero bytes).
#[inline]
fn tlps(payload_bytes: u64, max_payload_bytes: u32) -> u64 {
    debug_assert!(
        max_payload_bytes > 0,
        "TLPs with no room for payload: expected max payload > 0, found 0"
    );
    let packets = payload_bytes.div_ceil(u64::from(max_payload_bytes)).max(1);
    // The fewest packets that hold the payload: one more than the last full one.
    debug_assert!(
        packets * u64::from(max_payload_bytes) >= payload_bytes,
        "{packets} TLPs of {max_payload_bytes} bytes cannot hold {payload_bytes} bytes"
    );
    debug_assert!(
        packets == 1 || (packets - 1) * u64::from(max_payload_bytes) < payload_bytes,
        "too many TLPs: expected {packets} - 1 TLPs of {max_payload_bytes} bytes to be too few \
         for {payload_bytes} bytes"
    );
    packets
}

/// Converts a byte count to nanoseconds at a rate given in femtoseconds per byte (rounded up,
/// so a transfer never takes zero time).
#[inline]
pub fn bytes_to_ns(bytes: u64, fs_per_byte: u64) -> u64 {
    debug_assert!(
        fs_per_byte >= 1,
        "infinite bandwidth: expected at least 1 fs per byte, found 0"
    );
    // The 64-bit path covers every transfer the model accepts (up to 64 MiB at 1 MB/s); the
    // 128-bit division is a library call that would dominate the simulator's profile.
    let ns = match bytes.checked_mul(fs_per_byte) {
        Some(fs) => fs.div_ceil(1_000_000),
        None => (u128::from(bytes) * u128::from(fs_per_byte)).div_ceil(1_000_000) as u64,
    };
    debug_assert_eq!(
        u128::from(ns),
        (u128::from(bytes) * u128::from(fs_per_byte)).div_ceil(1_000_000),
        "{bytes} bytes at {fs_per_byte} fs per byte: expected the exact time rounded up to a ns"
    );
    ns
}

/// Femtoseconds per byte for a bandwidth in bytes per second.
pub fn fs_per_byte(bytes_per_s: f64) -> u64 {
    debug_assert!(
        bytes_per_s > 0.0,
        "expected a positive bandwidth, found {bytes_per_s} bytes/s"
    );
    debug_assert!(
        bytes_per_s.is_finite(),
        "expected a finite bandwidth, found {bytes_per_s} bytes/s"
    );
    (1e15 / bytes_per_s).round().max(1.0) as u64
}

/// A transfer's packets, wire bytes and time on one direction of the link, computed once for
/// its payload size (`Link::transfer`). Protocol messages have fixed sizes, so the device
/// computes theirs when it is built, and a piece's data once per transfer size: the divisions
/// stay off the per-command path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfer {
    pub packets: u64,
    pub wire_bytes: u64,
    pub ns: u64,
}

/// A DMA read by the device of one size, computed once (`Link::dma_transfer`): the header-only
/// read requests towards the host, the first request's own time, and the data coming back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaTransfer {
    requests: Transfer,
    first_request_ns: u64,
    data: Transfer,
}

/// The times of one DMA read by the device (`Link::device_reads_host`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaRead {
    /// The first read request leaves for the host.
    pub start_ns: u64,
    /// Host memory has answered: the data could start back.
    pub data_ready_ns: u64,
    /// The data starts back (later than `data_ready_ns` if the link to the device is busy).
    pub data_start_ns: u64,
    /// The last byte has arrived at the device.
    pub arrival_ns: u64,
}

#[derive(Clone, Debug)]
pub struct Link {
    to_device: Timeline,
    to_host: Timeline,
    /// What each direction carried: `[to device, to host]`.
    traffic: [DirectionTraffic; 2],
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
            traffic: [DirectionTraffic::default(); 2],
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

    /// What sending `payload_bytes` (0 for a header-only TLP) costs: packets, wire bytes, time.
    pub fn transfer(&self, payload_bytes: u64) -> Transfer {
        let packets = tlps(payload_bytes, self.max_payload_bytes);
        let wire_bytes = payload_bytes + packets * u64::from(self.overhead_bytes);
        debug_assert!(
            wire_bytes >= payload_bytes,
            "fewer bytes on the wire than in the payload: expected >= {payload_bytes}, found \
             {wire_bytes}"
        );
        let ns = bytes_to_ns(wire_bytes, self.fs_per_byte);
        debug_assert!(
            wire_bytes == 0 || ns > 0,
            "{wire_bytes} bytes on the wire took no time: expected a duration > 0"
        );
        Transfer {
            packets,
            wire_bytes,
            ns,
        }
    }

    /// What a DMA read of `bytes` by the device costs (see `device_reads_host`).
    pub fn dma_transfer(&self, bytes: u64) -> DmaTransfer {
        let requests = tlps(bytes, self.max_read_request_bytes);
        let request_wire = requests * u64::from(self.overhead_bytes);
        DmaTransfer {
            requests: Transfer {
                packets: requests,
                wire_bytes: request_wire,
                ns: bytes_to_ns(request_wire, self.fs_per_byte),
            },
            first_request_ns: bytes_to_ns(u64::from(self.overhead_bytes), self.fs_per_byte),
            data: self.transfer(bytes),
        }
    }

    /// Debug builds: `transfer` was computed for this link (`transfer`), not another.
    #[inline]
    fn debug_check(&self, transfer: Transfer) {
        debug_assert_eq!(
            transfer,
            self.transfer(transfer.wire_bytes - transfer.packets * u64::from(self.overhead_bytes)),
            "a transfer computed for another link: expected its cost on this one"
        );
    }

    /// Sends `payload_bytes` (0 for a header-only TLP) once it is ready; returns
    /// `(start, arrival)`: when the first byte left and when the last byte arrived.
    pub fn send(
        &mut self,
        dir: Direction,
        carries: Carries,
        now_ns: u64,
        ready_ns: u64,
        payload_bytes: u64,
    ) -> (u64, u64) {
        let transfer = self.transfer(payload_bytes);
        self.send_transfer(dir, carries, now_ns, ready_ns, transfer)
    }

    /// `send` of a transfer whose cost was computed before (`transfer`).
    #[inline]
    pub fn send_transfer(
        &mut self,
        dir: Direction,
        carries: Carries,
        now_ns: u64,
        ready_ns: u64,
        transfer: Transfer,
    ) -> (u64, u64) {
        self.debug_check(transfer);
        self.traffic[dir as usize]
            .of(carries)
            .add(transfer.packets, transfer.wire_bytes);
        let start = self.timeline(dir).reserve(now_ns, ready_ns, transfer.ns);
        debug_assert!(
            start >= ready_ns,
            "transfer left before it was ready: expected start >= {ready_ns}, found {start}"
        );
        (start, start + transfer.ns + self.propagation_ns)
    }

    /// Two messages ready at `ready_ns`, the second sent behind the first in the same
    /// direction (`Timeline::reserve_back_to_back`): returns when each arrives.
    #[inline]
    pub fn send_back_to_back(
        &mut self,
        dir: Direction,
        carries: Carries,
        now_ns: u64,
        ready_ns: u64,
        (first, second): (Transfer, Transfer),
    ) -> (u64, u64) {
        self.debug_check(first);
        self.debug_check(second);
        let traffic = self.traffic[dir as usize].of(carries);
        traffic.add(first.packets, first.wire_bytes);
        traffic.add(second.packets, second.wire_bytes);
        let (a, b) = self
            .timeline(dir)
            .reserve_back_to_back(now_ns, ready_ns, first.ns, second.ns);
        let arrive = |start: u64, t: Transfer| start + t.ns + self.propagation_ns;
        (arrive(a, first), arrive(b, second))
    }

    /// The device reads `bytes` of host memory by DMA: read requests go to the host, the host
    /// memory answers, completions carry the data to the device.
    pub fn device_reads_host(
        &mut self,
        carries: Carries,
        now_ns: u64,
        ready_ns: u64,
        bytes: u64,
    ) -> DmaRead {
        let dma = self.dma_transfer(bytes);
        self.dma_read(carries, now_ns, ready_ns, dma)
    }

    /// `device_reads_host` of a read whose cost was computed before (`dma_transfer`).
    #[inline]
    pub fn dma_read(
        &mut self,
        carries: Carries,
        now_ns: u64,
        ready_ns: u64,
        transfer: DmaTransfer,
    ) -> DmaRead {
        let requests = transfer.requests;
        self.traffic[Direction::ToHost as usize]
            .of(carries)
            .add(requests.packets, requests.wire_bytes);
        let start = self.to_host.reserve(now_ns, ready_ns, requests.ns);
        // The first request reaches host memory one propagation later; data flows back as
        // soon as the host answers, overlapping the remaining requests.
        let first_request_arrival = start + transfer.first_request_ns + self.propagation_ns;
        let data_ready = first_request_arrival + self.host_read_latency_ns;
        let (data_start, arrival) = self.send_transfer(
            Direction::ToDevice,
            carries,
            now_ns,
            data_ready,
            transfer.data,
        );
        let dma = DmaRead {
            start_ns: start,
            data_ready_ns: data_ready,
            data_start_ns: data_start,
            arrival_ns: arrival,
        };
        // The device's breakdown reads these as consecutive stages of one piece.
        debug_assert!(
            dma.start_ns >= ready_ns,
            "DMA read requested before it was ready: expected start >= {ready_ns}, found {dma:?}"
        );
        debug_assert!(
            dma.data_ready_ns >= dma.start_ns + self.propagation_ns + self.host_read_latency_ns,
            "host answered a DMA read before its request arrived: expected data ready >= start + \
             propagation {} + host latency {}, found {dma:?}",
            self.propagation_ns,
            self.host_read_latency_ns
        );
        debug_assert!(
            dma.data_start_ns >= dma.data_ready_ns,
            "DMA data left before the host answered: expected data start >= data ready, found \
             {dma:?}"
        );
        debug_assert!(
            dma.arrival_ns >= dma.data_start_ns + self.propagation_ns,
            "DMA data arrived before it crossed the link: expected arrival >= data start + \
             propagation {}, found {dma:?}",
            self.propagation_ns
        );
        dma
    }

    /// Everything `dir` has carried since the link was created.
    pub fn traffic(&self, dir: Direction) -> DirectionTraffic {
        self.traffic[dir as usize]
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
        let (s1, a1) = link.send(Direction::ToHost, Carries::Data, 0, 0, 1000);
        let (s2, a2) = link.send(Direction::ToDevice, Carries::Data, 0, 0, 1000);
        let (s3, _) = link.send(Direction::ToHost, Carries::Protocol, 0, 0, 1000);
        assert_eq!((s1, a1), (0, 4100));
        assert_eq!(
            (s2, a2),
            (0, 4100),
            "full duplex: the other direction is free"
        );
        assert_eq!(s3, 4000, "same direction queues");
        // 1000 bytes at 128 per TLP: 8 packets, no overhead bytes configured.
        let to_host = link.traffic(Direction::ToHost);
        assert_eq!(
            to_host.data,
            Traffic {
                packets: 8,
                wire_bytes: 1000
            }
        );
        assert_eq!(
            to_host.protocol,
            Traffic {
                packets: 8,
                wire_bytes: 1000
            }
        );
        assert_eq!(link.traffic(Direction::ToDevice).total().packets, 8);
    }

    #[test]
    fn a_dma_read_counts_its_requests_towards_the_host_and_its_data_back() {
        let cfg = LinkConfig {
            generation: 3,
            lanes: 8,
            max_payload_bytes: 256,
            tlp_overhead_bytes: 26,
            max_read_request_bytes: 512,
            propagation_ns: 100,
            host_read_latency_ns: 300,
        };
        let mut link = Link::new(&cfg);
        link.device_reads_host(Carries::Data, 0, 0, 4096);
        // 4096 / 512 = 8 header-only read requests; 4096 / 256 = 16 completions with data.
        assert_eq!(
            link.traffic(Direction::ToHost).data,
            Traffic {
                packets: 8,
                wire_bytes: 8 * 26
            }
        );
        assert_eq!(
            link.traffic(Direction::ToDevice).data,
            Traffic {
                packets: 16,
                wire_bytes: 4096 + 16 * 26
            }
        );
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "infinite bandwidth: expected at least 1 fs per byte, found 0")]
    fn a_link_without_a_rate_is_caught() {
        bytes_to_ns(100, 0);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "TLPs with no room for payload")]
    fn tlps_without_payload_room_are_caught() {
        tlps(100, 0);
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
