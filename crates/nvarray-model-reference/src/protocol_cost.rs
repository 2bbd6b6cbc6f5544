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
