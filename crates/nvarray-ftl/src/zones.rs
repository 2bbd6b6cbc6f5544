//! Zoned namespaces (NVMe ZNS): zones written only at their write pointer, the zone state
//! machine with its open and active resource limits, Zone Append, zone management (open,
//! close, finish, reset) and report zones, each refusal with the status the ZNS command set
//! gives it.
//!
//! A write is checked in the order the specification's checks run (QEMU's and FEMU's ZNS
//! devices agree): the zone's state (Zone Is Full, Zone Is Read Only, Zone Is Offline), then
//! the write pointer (Zone Invalid Write), then the zone's capacity (Zone Boundary Error),
//! then the resources an implicit open needs (Too Many Active Zones, Too Many Open Zones).
//! When the open limit is reached, the implicitly opened zone that was opened first is closed
//! to make room; explicitly opened zones are never closed by the device.
//!
//! State only, in logical blocks: the timing model books a zone's pages like any flash write
//! (a zone is written in order, so it needs no collection).

use std::collections::VecDeque;

/// A zone's state (ZNS "Zone State", the value report zones gives in its upper nibble).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZoneState {
    Empty,
    ImplicitlyOpened,
    ExplicitlyOpened,
    Closed,
    ReadOnly,
    Full,
    Offline,
}

impl ZoneState {
    /// The ZNS encoding: 1h empty, 2h implicitly opened, 3h explicitly opened, 4h closed,
    /// Dh read only, Eh full, Fh offline.
    pub fn code(self) -> u8 {
        match self {
            ZoneState::Empty => 0x1,
            ZoneState::ImplicitlyOpened => 0x2,
            ZoneState::ExplicitlyOpened => 0x3,
            ZoneState::Closed => 0x4,
            ZoneState::ReadOnly => 0xD,
            ZoneState::Full => 0xE,
            ZoneState::Offline => 0xF,
        }
    }

    /// The state of a ZNS encoding (`code`'s inverse).
    pub fn from_code(code: u8) -> Option<ZoneState> {
        [
            ZoneState::Empty,
            ZoneState::ImplicitlyOpened,
            ZoneState::ExplicitlyOpened,
            ZoneState::Closed,
            ZoneState::ReadOnly,
            ZoneState::Full,
            ZoneState::Offline,
        ]
        .into_iter()
        .find(|s| s.code() == code)
    }

    fn is_open(self) -> bool {
        matches!(
            self,
            ZoneState::ImplicitlyOpened | ZoneState::ExplicitlyOpened
        )
    }

    /// Open or closed: holding an active resource.
    fn is_active(self) -> bool {
        self.is_open() || self == ZoneState::Closed
    }
}

/// Why a zoned command was refused: the ZNS command-specific statuses (status code type 1h)
/// and the two generic ones a zoned command can meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneStatus {
    #[error("LBA out of range (generic 80h)")]
    LbaOutOfRange,
    #[error("invalid field: a Zone Append must name its zone's first block (generic 02h)")]
    InvalidField,
    #[error("zone boundary error (B8h): the write runs past the zone's capacity")]
    ZoneBoundaryError,
    #[error("zone is full (B9h)")]
    ZoneIsFull,
    #[error("zone is read only (BAh)")]
    ZoneIsReadOnly,
    #[error("zone is offline (BBh)")]
    ZoneIsOffline,
    #[error("zone invalid write (BCh): not at the zone's write pointer")]
    ZoneInvalidWrite,
    #[error("too many active zones (BDh)")]
    TooManyActiveZones,
    #[error("too many open zones (BEh)")]
    TooManyOpenZones,
    #[error("invalid zone state transition (BFh)")]
    InvalidZoneStateTransition,
}

impl ZoneStatus {
    /// The status code: `(status code type, status code)`.
    pub fn code(self) -> (u8, u8) {
        match self {
            ZoneStatus::LbaOutOfRange => (0x0, 0x80),
            ZoneStatus::InvalidField => (0x0, 0x02),
            ZoneStatus::ZoneBoundaryError => (0x1, 0xB8),
            ZoneStatus::ZoneIsFull => (0x1, 0xB9),
            ZoneStatus::ZoneIsReadOnly => (0x1, 0xBA),
            ZoneStatus::ZoneIsOffline => (0x1, 0xBB),
            ZoneStatus::ZoneInvalidWrite => (0x1, 0xBC),
            ZoneStatus::TooManyActiveZones => (0x1, 0xBD),
            ZoneStatus::TooManyOpenZones => (0x1, 0xBE),
            ZoneStatus::InvalidZoneStateTransition => (0x1, 0xBF),
        }
    }
}

/// A zoned namespace's shape, in logical blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ZoneLayout {
    pub zones: u32,
    /// Blocks from one zone's start to the next's.
    pub zone_blocks: u64,
    /// Blocks of a zone that can be written (at most `zone_blocks`).
    pub capacity_blocks: u64,
    /// Zones that may be open at once (0: no limit).
    pub max_open: u32,
    /// Zones that may be open or closed at once (0: no limit).
    pub max_active: u32,
}

/// The `[zns]` section: the device's namespace is zoned (NVMe ZNS). Off by default. Flash
/// only, and not with `[ftl]`: a zoned namespace is written in order and reset by the host, so
/// the device has nothing to collect.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZnsConfig {
    #[serde(default)]
    pub enabled: bool,
    /// Bytes from one zone's start to the next's (0, the default: one line, an erase block on
    /// every die, as ZNS drives size their zones from their superblocks).
    #[serde(default)]
    pub zone_bytes: u64,
    /// Bytes of a zone that can be written (0, the default: the whole zone).
    #[serde(default)]
    pub zone_capacity_bytes: u64,
    /// Zones open at once (0, the default: no limit); at the limit a write that opens a zone
    /// implicitly closes the implicitly opened zone opened first.
    #[serde(default)]
    pub max_open_zones: u32,
    /// Zones open or closed at once (0, the default: no limit).
    #[serde(default)]
    pub max_active_zones: u32,
}

/// Zones a namespace may have: a state byte and a write pointer each, kept in memory (ZNS
/// drives have some thousands to tens of thousands).
pub const ZONES_MAX: u64 = 1 << 22;

impl ZnsConfig {
    /// The zones over `capacity_bytes` of `block_bytes` blocks, `line_bytes` the default zone
    /// size; an error names the field at fault.
    pub fn layout(
        &self,
        capacity_bytes: u64,
        block_bytes: u64,
        line_bytes: u64,
    ) -> Result<ZoneLayout, (&'static str, String)> {
        let zone_bytes = if self.zone_bytes == 0 {
            line_bytes
        } else {
            self.zone_bytes
        };
        let capacity = if self.zone_capacity_bytes == 0 {
            zone_bytes
        } else {
            self.zone_capacity_bytes
        };
        if zone_bytes == 0
            || !zone_bytes.is_multiple_of(block_bytes)
            || !capacity_bytes.is_multiple_of(zone_bytes)
        {
            return Err((
                "zns.zone_bytes",
                format!(
                    "a multiple of the block size ({block_bytes}) that divides \
                     memory.capacity_bytes ({capacity_bytes}); found {zone_bytes}"
                ),
            ));
        }
        if capacity == 0 || capacity > zone_bytes || !capacity.is_multiple_of(block_bytes) {
            return Err((
                "zns.zone_capacity_bytes",
                format!(
                    "a multiple of the block size ({block_bytes}) no larger than the zone \
                     ({zone_bytes}); found {capacity}"
                ),
            ));
        }
        let zones = capacity_bytes / zone_bytes;
        if zones > ZONES_MAX {
            return Err((
                "zns.zone_bytes",
                format!("at most {ZONES_MAX} zones; {zone_bytes} makes {zones}"),
            ));
        }
        if self.max_active_zones != 0 && self.max_open_zones > self.max_active_zones {
            return Err((
                "zns.max_open_zones",
                format!(
                    "at most zns.max_active_zones ({}); found {}",
                    self.max_active_zones, self.max_open_zones
                ),
            ));
        }
        Ok(ZoneLayout {
            zones: zones as u32,
            zone_blocks: zone_bytes / block_bytes,
            capacity_blocks: capacity / block_bytes,
            max_open: self.max_open_zones,
            max_active: self.max_active_zones,
        })
    }
}

/// One zone as report zones describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ZoneDescriptor {
    pub state: ZoneState,
    pub start_block: u64,
    pub capacity_blocks: u64,
    pub write_pointer: u64,
}

/// A zone management action (Zone Management Send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneAction {
    Open,
    Close,
    Finish,
    Reset,
}

pub struct Zones {
    layout: ZoneLayout,
    state: Vec<ZoneState>,
    write_pointer: Vec<u64>,
    /// Implicitly opened zones, the first opened first (the one auto-closed).
    implicit: VecDeque<u32>,
    open: u32,
    active: u32,
}

impl Zones {
    /// Every zone empty.
    pub fn new(layout: ZoneLayout) -> Result<Zones, String> {
        if layout.zones == 0 || layout.capacity_blocks == 0 {
            return Err("a zoned namespace needs at least one zone of non-zero capacity".into());
        }
        if layout.capacity_blocks > layout.zone_blocks {
            return Err(format!(
                "zone capacity {} blocks exceeds the zone size {}",
                layout.capacity_blocks, layout.zone_blocks
            ));
        }
        if layout.max_active != 0 && layout.max_open > layout.max_active {
            return Err(format!(
                "max open zones {} exceeds max active zones {}",
                layout.max_open, layout.max_active
            ));
        }
        Ok(Zones {
            layout,
            state: vec![ZoneState::Empty; layout.zones as usize],
            write_pointer: (0..u64::from(layout.zones))
                .map(|z| z * layout.zone_blocks)
                .collect(),
            implicit: VecDeque::new(),
            open: 0,
            active: 0,
        })
    }

    pub fn layout(&self) -> ZoneLayout {
        self.layout
    }

    /// Report zones: every zone from `first`.
    pub fn report(&self, first: u32) -> Vec<ZoneDescriptor> {
        (first..self.layout.zones)
            .map(|z| self.descriptor(z))
            .collect()
    }

    pub fn descriptor(&self, zone: u32) -> ZoneDescriptor {
        ZoneDescriptor {
            state: self.state[zone as usize],
            start_block: self.start(zone),
            capacity_blocks: self.layout.capacity_blocks,
            write_pointer: self.write_pointer[zone as usize],
        }
    }

    /// Zones open and active now.
    pub fn open_and_active(&self) -> (u32, u32) {
        (self.open, self.active)
    }

    fn start(&self, zone: u32) -> u64 {
        u64::from(zone) * self.layout.zone_blocks
    }

    fn zone_of(&self, block: u64) -> Result<u32, ZoneStatus> {
        let zone = block / self.layout.zone_blocks;
        if zone >= u64::from(self.layout.zones) {
            return Err(ZoneStatus::LbaOutOfRange);
        }
        Ok(zone as u32)
    }

    /// A write of `blocks` at `start`.
    pub fn write(&mut self, start: u64, blocks: u64) -> Result<(), ZoneStatus> {
        let zone = self.zone_of(start)?;
        self.check_state_for_write(zone)?;
        if start != self.write_pointer[zone as usize] {
            return Err(ZoneStatus::ZoneInvalidWrite);
        }
        self.advance(zone, blocks)
    }

    /// A Zone Append of `blocks` to the zone starting at `zone_start`: returns the block it
    /// was written at (the write pointer it found).
    pub fn append(&mut self, zone_start: u64, blocks: u64) -> Result<u64, ZoneStatus> {
        let zone = self.zone_of(zone_start)?;
        if zone_start != self.start(zone) {
            return Err(ZoneStatus::InvalidField);
        }
        self.check_state_for_write(zone)?;
        let at = self.write_pointer[zone as usize];
        self.advance(zone, blocks)?;
        Ok(at)
    }

    /// A read of `blocks` at `start`: refused only for an offline zone or out of range (blocks
    /// past the write pointer read as zeros).
    pub fn read(&self, start: u64, blocks: u64) -> Result<(), ZoneStatus> {
        let end = start
            .checked_add(blocks)
            .filter(|&e| e <= u64::from(self.layout.zones) * self.layout.zone_blocks)
            .ok_or(ZoneStatus::LbaOutOfRange)?;
        let last = self.zone_of(end.saturating_sub(1).max(start))?;
        for zone in self.zone_of(start)?..=last {
            if self.state[zone as usize] == ZoneState::Offline {
                return Err(ZoneStatus::ZoneIsOffline);
            }
        }
        Ok(())
    }

    fn check_state_for_write(&self, zone: u32) -> Result<(), ZoneStatus> {
        match self.state[zone as usize] {
            ZoneState::Full => Err(ZoneStatus::ZoneIsFull),
            ZoneState::ReadOnly => Err(ZoneStatus::ZoneIsReadOnly),
            ZoneState::Offline => Err(ZoneStatus::ZoneIsOffline),
            _ => Ok(()),
        }
    }

    /// Moves `zone`'s write pointer on by `blocks` after the capacity and resource checks,
    /// opening it implicitly if it was not open, and filling it when it reaches capacity.
    fn advance(&mut self, zone: u32, blocks: u64) -> Result<(), ZoneStatus> {
        let z = zone as usize;
        let wp = self.write_pointer[z];
        if blocks == 0 || wp + blocks > self.start(zone) + self.layout.capacity_blocks {
            return Err(ZoneStatus::ZoneBoundaryError);
        }
        if !self.state[z].is_open() {
            self.make_open(zone, ZoneState::ImplicitlyOpened)?;
        }
        self.write_pointer[z] = wp + blocks;
        if self.write_pointer[z] == self.start(zone) + self.layout.capacity_blocks {
            self.release(zone);
            self.state[z] = ZoneState::Full;
        }
        Ok(())
    }

    /// Opens an empty or closed zone as `to`, closing the first implicitly opened zone if the
    /// open limit is reached.
    fn make_open(&mut self, zone: u32, to: ZoneState) -> Result<(), ZoneStatus> {
        let z = zone as usize;
        let was_active = self.state[z].is_active();
        let (max_open, max_active) = (self.layout.max_open, self.layout.max_active);
        if !was_active && max_active != 0 && self.active >= max_active {
            return Err(ZoneStatus::TooManyActiveZones);
        }
        if max_open != 0 && self.open >= max_open {
            let Some(oldest) = self.implicit.pop_front() else {
                return Err(ZoneStatus::TooManyOpenZones);
            };
            self.state[oldest as usize] = ZoneState::Closed;
            self.open -= 1;
        }
        if !was_active {
            self.active += 1;
        }
        self.open += 1;
        debug_assert!(
            self.open <= self.active,
            "{} zones open but only {} active",
            self.open,
            self.active
        );
        self.state[z] = to;
        if to == ZoneState::ImplicitlyOpened {
            self.implicit.push_back(zone);
        }
        Ok(())
    }

    /// Gives back what `zone` held: its open and active resources.
    fn release(&mut self, zone: u32) {
        let state = self.state[zone as usize];
        if state.is_open() {
            self.open -= 1;
        }
        if state.is_active() {
            self.active -= 1;
        }
        if state == ZoneState::ImplicitlyOpened {
            self.implicit.retain(|&z| z != zone);
        }
    }

    /// Zone Management Send on the zone that starts at `zone_start`.
    pub fn manage(&mut self, zone_start: u64, action: ZoneAction) -> Result<(), ZoneStatus> {
        let zone = self.zone_of(zone_start)?;
        if zone_start != self.start(zone) {
            return Err(ZoneStatus::InvalidField);
        }
        let z = zone as usize;
        let state = self.state[z];
        if matches!(state, ZoneState::ReadOnly | ZoneState::Offline) {
            return Err(ZoneStatus::InvalidZoneStateTransition);
        }
        match action {
            ZoneAction::Open => match state {
                ZoneState::ExplicitlyOpened => Ok(()),
                ZoneState::ImplicitlyOpened => {
                    self.implicit.retain(|&o| o != zone);
                    self.state[z] = ZoneState::ExplicitlyOpened;
                    Ok(())
                }
                ZoneState::Empty | ZoneState::Closed => {
                    self.make_open(zone, ZoneState::ExplicitlyOpened)
                }
                _ => Err(ZoneStatus::InvalidZoneStateTransition),
            },
            ZoneAction::Close => match state {
                ZoneState::Closed => Ok(()),
                s if s.is_open() => {
                    self.release(zone);
                    if self.write_pointer[z] == self.start(zone) {
                        self.state[z] = ZoneState::Empty;
                    } else {
                        self.state[z] = ZoneState::Closed;
                        self.active += 1;
                    }
                    Ok(())
                }
                _ => Err(ZoneStatus::InvalidZoneStateTransition),
            },
            ZoneAction::Finish => {
                self.release(zone);
                self.state[z] = ZoneState::Full;
                self.write_pointer[z] = self.start(zone) + self.layout.capacity_blocks;
                Ok(())
            }
            ZoneAction::Reset => {
                self.release(zone);
                self.state[z] = ZoneState::Empty;
                self.write_pointer[z] = self.start(zone);
                Ok(())
            }
        }
    }

    /// Zone Management Send with Select All: `action` on every zone it applies to (open: the
    /// closed zones; close: the open ones; finish: the open and closed ones; reset: those and
    /// the full ones), the rest left alone. The first refusal stops it there.
    pub fn manage_all(&mut self, action: ZoneAction) -> Result<(), ZoneStatus> {
        for zone in 0..self.layout.zones {
            let state = self.state[zone as usize];
            let applies = match action {
                ZoneAction::Open => state == ZoneState::Closed,
                ZoneAction::Close => state.is_open(),
                ZoneAction::Finish => state.is_active(),
                ZoneAction::Reset => state.is_active() || state == ZoneState::Full,
            };
            if applies {
                self.manage(self.start(zone), action)?;
            }
        }
        Ok(())
    }

    /// Puts `zone` in read-only or offline, as a device does when its media fails (tests
    /// and failure injection): it gives back its resources.
    pub fn fail(&mut self, zone: u32, to: ZoneState) {
        assert!(
            matches!(to, ZoneState::ReadOnly | ZoneState::Offline),
            "a zone fails to read-only or offline, not {to:?}"
        );
        self.release(zone);
        self.state[zone as usize] = to;
    }

    /// Checks the resource counts against the states (tests).
    pub fn check_consistency(&self) -> Result<(), String> {
        let open = self.state.iter().filter(|s| s.is_open()).count() as u32;
        let active = self.state.iter().filter(|s| s.is_active()).count() as u32;
        let implicit = self
            .state
            .iter()
            .filter(|&&s| s == ZoneState::ImplicitlyOpened)
            .count();
        if (open, active, implicit) != (self.open, self.active, self.implicit.len()) {
            return Err(format!(
                "counted open {} active {} implicit {}, states give {open} {active} {implicit}",
                self.open,
                self.active,
                self.implicit.len()
            ));
        }
        let limit = |max: u32, n: u32| max == 0 || n <= max;
        if !limit(self.layout.max_open, open) || !limit(self.layout.max_active, active) {
            return Err(format!("limits exceeded: open {open}, active {active}"));
        }
        Ok(())
    }
}
