//! `DeviceModel`: the timing model a device runs, chosen by `[model] kind`: the whole array
//! (`ArrayModel`, `device.rs`) or the null device (`NullModel`, `null_device.rs`), behind the
//! network of `[fabric]` when the device is remote (`Fabric`, `fabric.rs`). Both engines and
//! every front end hold this type; the models share one contract (see `submit`).

use crate::config::{DeviceConfig, ModelKind};
use crate::device::{ArrayModel, Command, Completion, ResourceBusy};
use crate::error::CommandError;
use crate::fabric::Fabric;
use crate::link::DirectionTraffic;
use crate::memory::WearStats;
use crate::null_device::NullModel;

/// A device's timing model: the device itself, and the network in front of it if it is
/// remote.
#[derive(Clone, Debug)]
pub struct DeviceModel {
    device: Device,
    /// `None` for a local device: then every call goes straight to `device`.
    fabric: Option<Box<Fabric>>,
}

// One per device, never moved on the hot path: boxing the array would add a pointer chase to
// every call for no memory worth saving.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Device {
    Array(ArrayModel),
    Null(NullModel),
}

impl Device {
    #[inline]
    fn submit(&mut self, cmd: Command, now_ns: u64) -> Result<(), CommandError> {
        match self {
            Device::Array(m) => m.submit(cmd, now_ns),
            Device::Null(m) => m.submit(cmd, now_ns),
        }
    }

    #[inline]
    fn next_event_ns(&self) -> Option<u64> {
        match self {
            Device::Array(m) => m.next_event_ns(),
            Device::Null(m) => m.next_event_ns(),
        }
    }

    #[inline]
    fn advance(&mut self, now_ns: u64, on_complete: impl FnMut(Completion)) {
        match self {
            Device::Array(m) => m.advance(now_ns, on_complete),
            Device::Null(m) => m.advance(now_ns, on_complete),
        }
    }
}

impl DeviceModel {
    /// Builds the device; the config must already be valid (`DeviceConfig::validate`).
    pub fn new(cfg: &DeviceConfig) -> Self {
        let device = match cfg.model.kind {
            ModelKind::Array => Device::Array(ArrayModel::new(cfg)),
            ModelKind::Null => Device::Null(NullModel::new(cfg)),
        };
        DeviceModel {
            device,
            fabric: Fabric::new(&cfg.fabric).map(Box::new),
        }
    }

    pub fn config(&self) -> &DeviceConfig {
        match &self.device {
            Device::Array(m) => m.config(),
            Device::Null(m) => m.config(),
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
        // Writes stop, refused, once the FTL's maps outgrow the machine's budget for them.
        if cmd.op == crate::device::Op::Write {
            self.check_ftl_map_budget()
                .map_err(CommandError::MapBudget)?;
        }
        if self.fabric.is_none() {
            return self.device.submit(cmd, now_ns);
        }
        // Refused now, before it travels: the device would refuse it on arrival.
        self.check(cmd.offset_bytes, cmd.len_bytes)?;
        if let Some(fabric) = &mut self.fabric {
            fabric.send(cmd, now_ns);
        }
        Ok(())
    }

    /// Time of the device's next internal event (or of a request reaching a remote device),
    /// if any.
    #[inline]
    pub fn next_event_ns(&self) -> Option<u64> {
        let device = self.device.next_event_ns();
        match &self.fabric {
            None => device,
            Some(fabric) => match (device, fabric.next_arrival_ns()) {
                (Some(d), Some(a)) => Some(d.min(a)),
                (d, a) => d.or(a),
            },
        }
    }

    /// Commands issued and not yet reported as complete.
    pub fn in_flight(&self) -> usize {
        let device = match &self.device {
            Device::Array(m) => m.in_flight(),
            Device::Null(m) => m.in_flight(),
        };
        device + self.fabric.as_ref().map_or(0, |f| f.in_transit())
    }

    /// Does everything due at or before `now_ns`, reporting each finished command with the
    /// time the host can see it (never earlier than the moment `advance` reports it).
    /// Always inlined, as `ArrayModel::advance` behind it is: a dispatch.
    #[inline(always)]
    pub fn advance(&mut self, now_ns: u64, mut on_complete: impl FnMut(Completion)) {
        let Some(fabric) = &mut self.fabric else {
            self.device.advance(now_ns, on_complete);
            return;
        };
        // Event by event, in time order: a request reaches the device only after the device
        // has done everything due before it, and each completion starts back at the instant
        // the device reports it.
        loop {
            let device_next = self.device.next_event_ns().filter(|&t| t <= now_ns);
            let arrival_next = fabric.next_arrival_ns().filter(|&t| t <= now_ns);
            match (device_next, arrival_next) {
                (None, None) => break,
                (Some(d), a) if a.is_none_or(|a| d <= a) => {
                    self.device
                        .advance(d, |c| on_complete(fabric.respond(c, d)));
                }
                (_, Some(a)) => {
                    self.device
                        .advance(a, |c| on_complete(fabric.respond(c, a)));
                    let (cmd, at_ns) = fabric.arrive(a).expect("an arrival is due");
                    self.device
                        .submit(cmd, at_ns)
                        .expect("the command passed the device's checks when it was sent");
                }
                (Some(_), None) => unreachable!("a device event with no arrival is the arm above"),
            }
        }
        self.device
            .advance(now_ns, |c| on_complete(fabric.respond(c, now_ns)));
    }

    /// Busy time of every resource so far.
    pub fn resource_busy(&self) -> ResourceBusy {
        let mut busy = match &self.device {
            Device::Array(m) => m.resource_busy(),
            Device::Null(m) => m.resource_busy(),
        };
        if let Some(f) = &self.fabric {
            (
                busy.fabric_to_device_ns,
                busy.fabric_to_host_ns,
                busy.remote_cpu_ns,
            ) = f.busy_ns();
            busy.remote_cpu_cores = f.remote_cpu_cores();
        }
        busy
    }

    pub fn wear_stats(&self) -> Option<WearStats> {
        match &self.device {
            Device::Array(m) => m.wear_stats(),
            Device::Null(_) => None,
        }
    }

    /// Flash erases performed.
    pub fn erases(&self) -> u64 {
        match &self.device {
            Device::Array(m) => m.erases(),
            Device::Null(_) => 0,
        }
    }

    /// When a flush issued at `now_ns` is done: once flash behind an FTL has programmed every
    /// page of its DRAM write buffer (`ftl.write_buffer_bytes`), at once on every other
    /// device.
    pub fn drained_ns(&self, now_ns: u64) -> u64 {
        match &self.device {
            Device::Array(m) => m.drained_ns(now_ns),
            Device::Null(_) => now_ns,
        }
    }

    /// Deallocates a checked range at once (NVMe Dataset Management, NBD trim): the flash
    /// pages wholly inside it are unmapped in the FTL. It takes no modelled time and changes
    /// nothing on a memory without an FTL. Returns the pages unmapped.
    pub fn deallocate(&mut self, offset_bytes: u64, len_bytes: u32) -> u64 {
        match &mut self.device {
            Device::Array(m) => m.deallocate(offset_bytes, len_bytes),
            Device::Null(_) => 0,
        }
    }

    /// Whether the model has untimed work left over: a flash collection's map moves, which
    /// change no result and wait for `run_deferred` (or for whatever first depends on them).
    pub fn has_deferred(&self) -> bool {
        match &self.device {
            Device::Array(m) => m.has_deferred(),
            Device::Null(_) => false,
        }
    }

    /// Runs up to `pages` page moves of that work (about 30 ns each on a map that misses the
    /// caches); returns whether any is left. An emulator calls it between its passes, so the
    /// real-time cost of a large collection does not hold its deadlines (issue 56).
    pub fn run_deferred(&mut self, pages: u32) -> bool {
        match &mut self.device {
            Device::Array(m) => m.run_deferred(pages),
            Device::Null(_) => false,
        }
    }

    /// Pages whose map entries a flash collector has moved so far, at once or deferred: the
    /// model's one piece of real-time work that grows with the device (a line of 10,000
    /// pages, 0.3 ms), which an emulator timing itself allows for (0 on other devices).
    pub fn map_moves(&self) -> u64 {
        match &self.device {
            Device::Array(m) => m.map_moves(),
            Device::Null(_) => 0,
        }
    }

    /// What the FTL did, for flash behind one (`[ftl]`).
    pub fn ftl_stats(&self) -> Option<crate::FtlStats> {
        match &self.device {
            Device::Array(m) => m.ftl_stats(),
            Device::Null(_) => None,
        }
    }

    /// Whether the FTL's maps are within `ftl.map_budget_bytes`: why not if they are past it
    /// (an engine stops the run then).
    pub fn check_ftl_map_budget(&self) -> Result<(), String> {
        match &self.device {
            Device::Array(m) => m.check_ftl_map_budget(),
            Device::Null(_) => Ok(()),
        }
    }

    /// What each direction of the link has carried so far: `(to device, to host)` (nothing,
    /// for the null device).
    pub fn link_traffic(&self) -> (DirectionTraffic, DirectionTraffic) {
        match &self.device {
            Device::Array(m) => m.link_traffic(),
            Device::Null(_) => Default::default(),
        }
    }

    /// Payload bandwidth of one link direction (for reports).
    pub fn link_usable_bytes_per_s(&self) -> f64 {
        match &self.device {
            Device::Array(m) => m.link_usable_bytes_per_s(),
            Device::Null(_) => f64::INFINITY,
        }
    }

    pub fn commands_done(&self) -> u64 {
        match &self.device {
            Device::Array(m) => m.commands_done(),
            Device::Null(m) => m.commands_done(),
        }
    }
}
