//! What one command costs on the host link under each command protocol: packets (TLPs) and
//! bytes in each direction, split into the data and the protocol around it. This is DC
//! Express's argument ("minimizes number of packets per command", HGST 2016 slides) made
//! visible, and it is measured, not tabulated: one command runs alone on a fresh `DeviceModel`
//! and the link's own counters are read, so the table cannot drift from the timing model.

use serde::Serialize;

use crate::config::{DeviceConfig, Protocol};
use crate::device::{Command, Op};
use crate::device_model::DeviceModel;
use crate::link::DirectionTraffic;

/// The link traffic of one command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CommandTraffic {
    pub protocol: &'static str,
    pub op: Op,
    pub len_bytes: u32,
    pub to_device: DirectionTraffic,
    pub to_host: DirectionTraffic,
}

impl CommandTraffic {
    /// Packets in both directions.
    pub fn packets(&self) -> u64 {
        self.to_device.total().packets + self.to_host.total().packets
    }

    /// Packets in both directions that carry no data.
    pub fn protocol_packets(&self) -> u64 {
        self.to_device.protocol.packets + self.to_host.protocol.packets
    }
}

/// The traffic of one `op` of `len_bytes` on `cfg`'s link and controller, speaking `protocol`;
/// `None` if the device cannot take such a command (a size not a multiple of its block).
pub fn command_traffic(
    cfg: &DeviceConfig,
    protocol: Protocol,
    op: Op,
    len_bytes: u32,
) -> Option<CommandTraffic> {
    let mut cfg = cfg.clone();
    cfg.interface.protocol = protocol;
    // Capacity and wear levelling do not change what crosses the link; a small array without
    // start-gap's counters makes this cheap for a 64 GB preset.
    let m = &cfg.memory;
    let stride = u64::from(m.controllers) * u64::from(m.stripe_bytes.max(cfg.wear.line_bytes));
    cfg.memory.capacity_bytes = stride * (u64::from(len_bytes).div_ceil(stride) + 1);
    cfg.wear.enabled = false;
    cfg.validate().ok()?;
    let mut dev = DeviceModel::new(&cfg);
    let cmd = Command {
        id: 0,
        op,
        offset_bytes: 0,
        len_bytes,
        placement: 0,
    };
    dev.submit(cmd, 0).ok()?;
    while let Some(t) = dev.next_event_ns() {
        dev.advance(t, |_| {});
    }
    let (to_device, to_host) = dev.link_traffic();
    Some(CommandTraffic {
        protocol: protocol.name(),
        op,
        len_bytes,
        to_device,
        to_host,
    })
}

/// The table `nvarray presets show NAME --protocol-cost` prints: every protocol on `cfg`'s
/// link, reads and writes of 512 B and 4 KiB (sizes the device cannot take are left out).
pub fn protocol_table(cfg: &DeviceConfig) -> Vec<CommandTraffic> {
    let mut rows = Vec::new();
    for protocol in Protocol::ALL {
        for op in [Op::Read, Op::Write] {
            for len_bytes in [512, 4096] {
                rows.extend(command_traffic(cfg, protocol, op, len_bytes));
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::Traffic;
    use crate::presets::preset;

    fn row(protocol: Protocol, op: Op, len: u32) -> CommandTraffic {
        let cfg = preset("dram").unwrap().load(&[]).unwrap();
        command_traffic(&cfg, protocol, op, len).unwrap()
    }

    /// The packets of each protocol, counted by hand from its description (dram preset:
    /// 256-byte payloads, 512-byte read requests, 26 bytes of overhead per TLP).
    #[test]
    fn each_protocol_sends_the_packets_its_description_says() {
        // NVMe 4 KiB read: doorbell, SQE fetch (request + completion), 16 data TLPs, CQE,
        // MSI, CQ head doorbell.
        let r = row(Protocol::Nvme, Op::Read, 4096);
        assert_eq!(
            r.to_device.protocol.packets, 3,
            "doorbell, SQE, CQ doorbell"
        );
        assert_eq!(r.to_host.protocol.packets, 3, "SQE request, CQE, MSI");
        assert_eq!(
            r.to_host.data,
            Traffic {
                packets: 16,
                wire_bytes: 4096 + 16 * 26
            }
        );
        assert_eq!(r.to_device.data.packets, 0);
        // DC Express 4 KiB read: one command write, the data; nothing else.
        let r = row(Protocol::DcExpress, Op::Read, 4096);
        assert_eq!(
            r.to_device.protocol,
            Traffic {
                packets: 1,
                wire_bytes: 8 + 26
            }
        );
        assert_eq!(
            r.to_host.protocol.packets, 0,
            "the data carries the completion"
        );
        assert_eq!(r.to_host.data.packets, 16);
        // DC Express write: the command, 8 read requests for the data, 16 data TLPs, and the
        // status word.
        let w = row(Protocol::DcExpress, Op::Write, 4096);
        assert_eq!(w.protocol_packets(), 2);
        assert_eq!(w.to_host.data.packets, 8);
        assert_eq!(w.to_device.data.packets, 16);
        // Moneta read: command word, data, interrupt, status read request and answer.
        let m = row(Protocol::Moneta, Op::Read, 512);
        assert_eq!(m.to_device.protocol.packets, 2);
        assert_eq!(m.to_host.protocol.packets, 2);
        assert_eq!(m.to_host.data.packets, 2);
    }

    #[test]
    fn dc_express_needs_the_fewest_packets_for_every_command() {
        for op in [Op::Read, Op::Write] {
            for len in [512, 4096] {
                let dc = row(Protocol::DcExpress, op, len).packets();
                for other in [Protocol::Moneta, Protocol::Nvme] {
                    assert!(dc < row(other, op, len).packets(), "{other:?} {op:?} {len}");
                }
            }
        }
    }

    #[test]
    fn sizes_a_device_cannot_take_are_left_out() {
        let mut cfg = preset("dram").unwrap().load(&[]).unwrap();
        cfg.controller.block_bytes = 4096;
        cfg.controller.buffer_bytes = 16384;
        let rows = protocol_table(&cfg);
        assert!(rows.iter().all(|r| r.len_bytes == 4096));
        assert_eq!(rows.len(), 6);
    }
}
