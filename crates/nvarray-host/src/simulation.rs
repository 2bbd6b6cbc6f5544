//! The device a deterministic simulation runs on (issue 58): the `null` preset, whose every
//! command completes at once, so wall time changes nothing; driven inline (no device thread),
//! so one thread runs everything; on a durable file whose operations fail as a
//! `BackingFaults` plan draws them. The channel daemon's simulation and the NBD server's open
//! it, and `pattern` gives their writes contents a read can be checked against.

use std::path::Path;
use std::sync::Arc;

use crate::options::{BackingFaults, BackingKind, Options};
use crate::{Device, HostError};

/// The simulation's device.
#[derive(Clone, Debug)]
pub struct SimulatedDevice {
    pub size_bytes: u64,
    /// Device tags (commands in flight at once, over every queue pair); `None`: the preset's.
    pub tags: Option<u32>,
    /// The largest command: a DMA buffer's bytes.
    pub command_bytes: u32,
}

impl SimulatedDevice {
    /// Opens it on the file `path` (created if need be; reopened as it is), `faults`
    /// injected into its reads, writes, msyncs and fsyncs.
    pub fn open(&self, path: &Path, faults: &Arc<BackingFaults>) -> Result<Device, HostError> {
        let mut config = nvarray_model::presets::preset("null")
            .and_then(|p| p.load(&[]))
            .expect("the null preset is built in and loads");
        config.memory.capacity_bytes = self.size_bytes;
        if let Some(tags) = self.tags {
            config.controller.tags = tags;
        }
        let options = Options {
            backing: BackingKind::File {
                path: path.to_path_buf(),
                durable: true,
                read_only: false,
            },
            backing_faults: Some(Arc::clone(faults)),
            device_threads: 0,
            buffer_bytes: Some(self.command_bytes),
            ..Options::default()
        };
        Device::open(&config, &options)
    }
}

/// The `unit_bytes` bytes write `id` leaves in unit (sector, block) `unit`: different for
/// every write and every unit, so a read shows which write each unit holds. Write 0 is
/// zeroes: never written, or written with zeroes.
pub fn pattern(id: u32, unit: u64, unit_bytes: u64) -> Vec<u8> {
    if id == 0 {
        return vec![0; unit_bytes as usize];
    }
    (u64::from(id) << 32 | unit)
        .to_le_bytes()
        .repeat((unit_bytes / 8) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_write_and_by_unit() {
        assert_eq!(pattern(0, 3, 512), vec![0; 512]);
        assert_ne!(pattern(1, 3, 512), pattern(2, 3, 512));
        assert_ne!(pattern(1, 3, 512), pattern(1, 4, 512));
        assert_eq!(pattern(1, 3, 512).len(), 512);
    }
}
