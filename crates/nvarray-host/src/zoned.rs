//! Zoned namespaces (NVMe ZNS, a device with `[zns]`): preparing Zone Append, zone management
//! and report zones, reading what they return, and synchronous forms of each on a queue pair.
//!
//! Writes and reads of a zoned namespace are ordinary commands (`Device::prepare`); the
//! device refuses a write off its zone's write pointer with the zone's status
//! (`Status::ZoneInvalidWrite` and the rest).

use nvarray_emu::protocol::nvme;
use nvarray_model::zones::{ZoneAction, ZoneDescriptor, ZoneLayout};

use crate::command::{Done, Prepared};
use crate::device::Device;
use crate::error::HostError;
use crate::queue_pair::QueuePair;
use nvarray_emu::Opcode;

/// What report zones returned: how many zones there are from the first one asked for (or,
/// for a partial report, how many it holds), and the zones the buffer held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneReport {
    pub zones: u64,
    pub descriptors: Vec<ZoneDescriptor>,
}

impl Device {
    /// The namespace's zones, `None` when it is not zoned.
    pub fn zone_layout(&self) -> Option<ZoneLayout> {
        self.config().zone_layout().ok().flatten()
    }

    fn zoned(&self, what: &'static str) -> Result<ZoneLayout, HostError> {
        self.zone_layout().ok_or(HostError::NotZoned { what })
    }

    /// A Zone Append of `data` to the zone starting at `zone_start_bytes`: the device writes it
    /// at the zone's write pointer and says where (`appended_at`).
    pub fn prepare_zone_append(
        &self,
        zone_start_bytes: u64,
        data: &[u8],
    ) -> Result<Prepared, HostError> {
        self.zoned("zone append")?;
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        self.check(Opcode::ZoneAppend, zone_start_bytes, u64::from(len))?;
        self.prepare_unchecked(Opcode::ZoneAppend, zone_start_bytes, len, Some(data))
    }

    /// Zone Management Send: `action` on the zone starting at `zone_start_bytes`, or with
    /// `all` on every zone it applies to (NVMe's Select All; the offset is then ignored).
    pub fn prepare_zone_manage(
        &self,
        zone_start_bytes: u64,
        action: ZoneAction,
        all: bool,
    ) -> Result<Prepared, HostError> {
        self.zoned("zone management")?;
        let offset = if all { 0 } else { zone_start_bytes };
        let op = Opcode::ZoneManage { action, all };
        self.check(op, offset, u64::from(self.block_bytes()))?;
        self.prepare_unchecked(op, offset, 0, None)
    }

    /// Report zones from the zone holding `from_bytes`, into a buffer of `len_bytes` (a
    /// 64-byte header and 64 bytes a zone, at most the tag buffer); `partial`: the header
    /// counts the zones reported rather than every zone from the first.
    pub fn prepare_zone_report(
        &self,
        from_bytes: u64,
        len_bytes: u32,
        partial: bool,
    ) -> Result<Prepared, HostError> {
        self.zoned("report zones")?;
        let entry = nvme::ZONE_REPORT_ENTRY_BYTES as u32;
        if len_bytes < 2 * entry
            || len_bytes > self.command_bytes_max()
            || !len_bytes.is_multiple_of(self.block_bytes())
        {
            return Err(HostError::ZoneReportLength {
                len_bytes,
                block_bytes: self.block_bytes(),
                max_bytes: self.command_bytes_max(),
            });
        }
        let op = Opcode::ZoneReport { partial };
        self.check(op, from_bytes, u64::from(self.block_bytes()))?;
        self.prepare_unchecked(op, from_bytes, len_bytes, None)
    }

    /// Where a completed Zone Append's data went, in blocks from the start of the device.
    pub fn appended_at(&self, done: &Done) -> u64 {
        // Other commands leave 0 there, which would read as the device's first block.
        debug_assert_eq!(
            done.op,
            Opcode::ZoneAppend,
            "appended_at of another command"
        );
        // The device stored it before posting the completion `done` came from.
        self.dma().results[done.tag.index()].load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A completed report's zones (from the tag's buffer, before `finish`).
    pub fn zone_report(&self, done: &Done) -> Result<ZoneReport, HostError> {
        let (zones, descriptors) = nvme::read_zone_report(self.read_data(done), usize::MAX)
            .ok_or(HostError::ZoneReportMalformed)?;
        Ok(ZoneReport { zones, descriptors })
    }
}

/// Synchronous zoned commands on one queue pair (one command each, waited for).
impl QueuePair {
    /// Appends `data` to the zone starting at `zone_start_bytes`; returns the block it was
    /// written at.
    pub fn zone_append(
        &mut self,
        device: &Device,
        zone_start_bytes: u64,
        data: &[u8],
    ) -> Result<u64, HostError> {
        let p = device.prepare_zone_append(zone_start_bytes, data)?;
        let done = self.one(device, p)?;
        let at = device.appended_at(&done);
        device.finish(done, None).map(|()| at)
    }

    /// `action` on the zone starting at `zone_start_bytes` (`all`: on every zone).
    pub fn zone_manage(
        &mut self,
        device: &Device,
        zone_start_bytes: u64,
        action: ZoneAction,
        all: bool,
    ) -> Result<(), HostError> {
        let p = device.prepare_zone_manage(zone_start_bytes, action, all)?;
        let done = self.one(device, p)?;
        device.finish(done, None)
    }

    /// Every zone from the one holding `from_bytes`, in as many reports as it takes.
    pub fn report_zones(
        &mut self,
        device: &Device,
        from_bytes: u64,
    ) -> Result<Vec<ZoneDescriptor>, HostError> {
        let layout = device.zoned("report zones")?;
        let block = u64::from(device.block_bytes());
        let zone_bytes = layout.zone_blocks * block;
        let len =
            device.command_bytes_max().min(1 << 20) / device.block_bytes() * device.block_bytes();
        let mut out = Vec::new();
        let mut at = from_bytes - from_bytes % zone_bytes;
        while at < u64::from(layout.zones) * zone_bytes {
            let p = device.prepare_zone_report(at, len, true)?;
            let done = self.one(device, p)?;
            let report = if done.status.is_ok() {
                device.zone_report(&done)
            } else {
                Ok(ZoneReport {
                    zones: 0,
                    descriptors: Vec::new(),
                })
            };
            device.finish(done, None)?;
            let report = report?;
            let Some(last) = report.descriptors.last() else {
                break;
            };
            at = last.start_block * block + zone_bytes;
            out.extend(report.descriptors);
        }
        Ok(out)
    }

    /// Issues `p` and waits for its completion; refused (with `p`'s tag freed) while other
    /// commands are in flight on the pair, whose completions it would otherwise swallow.
    fn one(&mut self, device: &Device, p: Prepared) -> Result<Done, HostError> {
        if self.in_flight() > 0 {
            let in_flight = self.in_flight();
            device.cancel(p);
            return Err(HostError::InFlight { in_flight });
        }
        self.issue(p);
        let mut mine = None;
        while mine.is_none() {
            self.wait(|done| mine = Some(done));
        }
        debug_assert_eq!(
            self.in_flight(),
            0,
            "in flight after the pair's only command"
        );
        Ok(mine.expect("waited for"))
    }
}
