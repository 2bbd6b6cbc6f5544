//! The values that carry a command and its tag's buffer between the driver's parts: a
//! `Prepared` command (tag taken, a write's data in place) goes to a `QueuePair`, and comes
//! back as a `Done` for `Device::finish`. Neither can be copied, so a buffer has one owner.

use nvarray_emu::tag_pool::Tag;
use nvarray_emu::{Opcode, Status};

/// A command ready to issue: its tag is taken and a write's data is in the tag's buffer.
#[derive(Debug)]
pub struct Prepared {
    pub(crate) tag: Tag,
    pub(crate) op: Opcode,
    pub(crate) offset_bytes: u64,
    pub(crate) len_bytes: u32,
    pub(crate) in_data: bool,
    pub(crate) raw_opcode: Option<u8>,
    /// A write's placement handle (NVMe FDP), set by `Device::place`.
    pub(crate) placement: Option<u16>,
}

impl Prepared {
    pub fn tag(&self) -> Tag {
        self.tag
    }

    /// Sends `opcode` in place of the command's own (Moneta: 3 bits; NVMe: 8), so tests can
    /// show how the device answers an opcode it does not know.
    pub fn with_raw_opcode(mut self, opcode: u8) -> Self {
        self.raw_opcode = Some(opcode);
        self
    }

    /// Sends placement handle `handle` without `Device::place`'s checks, so tests can show
    /// how the device answers a handle it does not have.
    pub fn with_raw_placement(mut self, handle: u16) -> Self {
        self.placement = Some(handle);
        self
    }
}

/// A completed command. Hand it to `Device::finish` to get a read's data and free the tag.
#[derive(Debug)]
pub struct Done {
    pub tag: Tag,
    pub op: Opcode,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    pub status: Status,
    /// When the model completed it, on the emulator's clock (`Device::now_ns`): what the
    /// device took is from its issue to here, whenever the host collected it.
    pub deadline_ns: u64,
}
