//! A client's zoned-namespace calls (the daemon's device has `[zns]`): report zones, staged
//! through the DMA region, and zone management, waited for while other commands stay in
//! flight (what fio's `zonemode=zbd` needs: it resets zones between its own writes).

use nvarray_host::{read_zone_report, ZoneDescriptor, ZONE_REPORT_ENTRY_BYTES};

use crate::client::{command_result, Channel, Completion, Op};
use crate::status::ChannelStatus;
use crate::ChannelError;

/// `user_data` of the channel's own zone commands: a caller must not use it for a command of
/// its own while `zone_manage` runs (fio's are its io_us' addresses).
pub const ZONE_COMMAND: u64 = u64::MAX;

impl Channel {
    /// Every zone from the one holding `offset`, at most `max`, in as many reports as the DMA
    /// region needs. Needs the channel to itself (`ChannelError::Busy` otherwise), as the
    /// report is staged at the region's start. Zones are in blocks, as the device reports
    /// them.
    pub fn report_zones(
        &mut self,
        offset: u64,
        max: usize,
    ) -> Result<Vec<ZoneDescriptor>, ChannelError> {
        self.idle()?;
        let g = *self.geometry();
        if g.zone_bytes == 0 {
            return command_result(Op::ZoneReport, offset, 0, ChannelStatus::BadOpcode)
                .map(|()| Vec::new());
        }
        let entry = ZONE_REPORT_ENTRY_BYTES as u64;
        // A header and at least one zone, in whole blocks, at most one command.
        let len = (g.buffer_bytes.min(u64::from(g.command_bytes_max)) / u64::from(g.block_bytes)
            * u64::from(g.block_bytes))
        .max(2 * entry);
        let mut out = Vec::new();
        let mut at = offset - offset % g.zone_bytes;
        while at < g.size_bytes && out.len() < max {
            self.submit(Op::ZoneReport, at, len as u32, 0, ZONE_COMMAND)
                .expect("an idle channel has room, and the region holds a command");
            let mut status = ChannelStatus::Ok;
            self.wait(1, |c| status = c.status)?;
            command_result(Op::ZoneReport, at, len, status)?;
            let mut report = vec![0u8; len as usize];
            self.copy_from_region(0, &mut report);
            let (_, zones) =
                read_zone_report(&report, max - out.len()).ok_or(ChannelError::Command {
                    op: Op::ZoneReport.name(),
                    offset: at,
                    len,
                    status: ChannelStatus::IoError,
                })?;
            let Some(last) = zones.last() else { break };
            at = last.start_block * u64::from(g.block_bytes) + g.zone_bytes;
            out.extend(zones);
        }
        Ok(out)
    }

    /// `op` (`Op::ZoneReset`, `ZoneFinish`, `ZoneOpen` or `ZoneClose`) on the zone starting at
    /// `zone_offset`, waited for. Commands already in flight stay so: their completions, if
    /// they arrive meanwhile, go to `others` in the order they came. With the queue full it
    /// first waits for one of them.
    pub fn zone_manage(
        &mut self,
        op: Op,
        zone_offset: u64,
        mut others: impl FnMut(Completion),
    ) -> Result<(), ChannelError> {
        if !matches!(
            op,
            Op::ZoneReset | Op::ZoneFinish | Op::ZoneOpen | Op::ZoneClose
        ) {
            return command_result(op, zone_offset, 0, ChannelStatus::BadOpcode);
        }
        loop {
            match self.submit(op, zone_offset, 0, 0, ZONE_COMMAND) {
                Ok(()) => break,
                Err(_) => {
                    // The queue is full: one of the caller's commands must finish first.
                    self.wait(1, &mut others)?;
                }
            }
        }
        let mut status = None;
        while status.is_none() {
            self.wait(1, |c| {
                if c.user_data == ZONE_COMMAND {
                    status = Some(c.status);
                } else {
                    others(c);
                }
            })?;
        }
        command_result(op, zone_offset, 0, status.expect("waited for"))
    }
}
