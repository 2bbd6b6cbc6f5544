//! `DeviceModel`: the timing model a device runs, chosen by `[model] kind`: the whole array
//! (`ArrayModel`, `device.rs`) or the null device (`NullModel`, `null_device.rs`). Both engines
//! and every front end hold this type; the two models share one contract (see `submit`).

use crate::config::{DeviceConfig, ModelKind};
use crate::device::{ArrayModel, Command, Completion, ResourceBusy};
use crate::error::CommandError;
use crate::link::DirectionTraffic;
use crate::memory::WearStats;
use crate::null_device::NullModel;

// One per device, never moved on the hot path: boxing the array would add a pointer chase to
// every call for no memory worth saving.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum DeviceModel {
    Array(ArrayModel),
    Null(NullModel),
}

impl DeviceModel {
    /// Builds the device; the config must already be valid (`DeviceConfig::validate`).
    pub fn new(cfg: &DeviceConfig) -> Self {
        match cfg.model.kind {
            ModelKind::Array => DeviceModel::Array(ArrayModel::new(cfg)),
            ModelKind::Null => DeviceModel::Null(NullModel::new(cfg)),
        }
    }

    pub fn config(&self) -> &DeviceConfig {
        match self {
            DeviceModel::Array(m) => m.config(),
            DeviceModel::Null(m) => m.config(),
        }
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.config().memory.capacity_bytes
    }

    /// Checks a command against the device's geometry without changing anything.
    pub fn check(&self, offset_bytes: u64, len_bytes: u32) -> Result<(), CommandError> {
        crate::device::check_command(self.config(), offset_bytes, len_bytes)
    }

    /// Issues `cmd` at `now_ns` (not before the last call's time, and after `advance` has
    /// done every event due before `now_ns`: the command must find the device as it is at
    /// `now_ns`). A refused command changes nothing.
    #[inline]
    pub fn submit(&mut self, cmd: Command, now_ns: u64) -> Result<(), CommandError> {
        match self {
            DeviceModel::Array(m) => m.submit(cmd, now_ns),
            DeviceModel::Null(m) => m.submit(cmd, now_ns),
        }
    }

    /// Time of the device's next internal event, if any.
    #[inline]
    pub fn next_event_ns(&self) -> Option<u64> {
        match self {
            DeviceModel::Array(m) => m.next_event_ns(),
            DeviceModel::Null(m) => m.next_event_ns(),
        }
    }

    /// Commands issued and not yet reported as complete.
    pub fn in_flight(&self) -> usize {
        match self {
            DeviceModel::Array(m) => m.in_flight(),
            DeviceModel::Null(m) => m.in_flight(),
        }
    }

    /// Does everything due at or before `now_ns`, reporting each finished command with the
    /// time the host can see it (never earlier than the moment `advance` reports it).
    #[inline]
    pub fn advance(&mut self, now_ns: u64, on_complete: impl FnMut(Completion)) {
        match self {
            DeviceModel::Array(m) => m.advance(now_ns, on_complete),
            DeviceModel::Null(m) => m.advance(now_ns, on_complete),
        }
    }

    /// Busy time of every resource so far.
    pub fn resource_busy(&self) -> ResourceBusy {
        match self {
            DeviceModel::Array(m) => m.resource_busy(),
            DeviceModel::Null(m) => m.resource_busy(),
        }
    }

    pub fn wear_stats(&self) -> Option<WearStats> {
        match self {
            DeviceModel::Array(m) => m.wear_stats(),
            DeviceModel::Null(_) => None,
        }
    }

    /// Flash erases performed.
    pub fn erases(&self) -> u64 {
        match self {
            DeviceModel::Array(m) => m.erases(),
            DeviceModel::Null(_) => 0,
        }
    }

    /// What each direction of the link has carried so far: `(to device, to host)` (nothing,
    /// for the null device).
    pub fn link_traffic(&self) -> (DirectionTraffic, DirectionTraffic) {
        match self {
            DeviceModel::Array(m) => m.link_traffic(),
            DeviceModel::Null(_) => Default::default(),
        }
    }

    /// Payload bandwidth of one link direction (for reports).
    pub fn link_usable_bytes_per_s(&self) -> f64 {
        match self {
            DeviceModel::Array(m) => m.link_usable_bytes_per_s(),
            DeviceModel::Null(_) => f64::INFINITY,
        }
    }

    pub fn commands_done(&self) -> u64 {
        match self {
            DeviceModel::Array(m) => m.commands_done(),
            DeviceModel::Null(m) => m.commands_done(),
        }
    }
}
