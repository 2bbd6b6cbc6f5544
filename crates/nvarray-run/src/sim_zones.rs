//! A zoned namespace in the simulator: the same zone state machine the emulated device keeps
//! (`nvarray_model::zones`), so a write off its zone's write pointer stops a simulated run with
//! the status the emulator's device refuses it with, and both engines run the same jobs.

use nvarray_model::zones::Zones;
use nvarray_model::DeviceConfig;

use crate::error::SimError;

pub struct SimZones {
    zones: Zones,
    block_bytes: u64,
}

impl SimZones {
    /// The device's zones when it has `[zns]`.
    pub fn of(device: &DeviceConfig) -> Result<Option<SimZones>, SimError> {
        let Some(layout) = device
            .zone_layout()
            .map_err(|e| SimError::Zoned(e.to_string()))?
        else {
            return Ok(None);
        };
        let zones = Zones::new(layout).map_err(SimError::Zoned)?;
        Ok(Some(SimZones {
            zones,
            block_bytes: u64::from(device.controller.block_bytes),
        }))
    }

    /// A write of `len_bytes` at `offset_bytes`: at its zone's write pointer, or refused.
    pub fn write(&mut self, offset_bytes: u64, len_bytes: u32) -> Result<(), SimError> {
        let block = self.block_bytes;
        self.zones
            .write(offset_bytes / block, u64::from(len_bytes) / block)
            .map_err(|status| SimError::ZoneRefused {
                offset_bytes,
                len_bytes,
                status,
            })
    }
}
