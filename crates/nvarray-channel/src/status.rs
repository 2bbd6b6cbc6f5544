//! A channel command's completion status: the device's own (`nvarray_host::Status`) plus the
//! refusals only a channel has (a permission the daemon did not grant, a malformed ring
//! field), with the errno the C library returns for each.

use nvarray_host::Status;

/// The `status` of a `CqEntry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ChannelStatus {
    Ok = 0,
    OutOfRange = 1,
    Misaligned = 2,
    BadLength = 3,
    IoError = 4,
    BadOpcode = 5,
    /// A field of the entry is malformed: an id at or past the queue depth, a buffer outside
    /// the channel's DMA region.
    BadField = 6,
    /// The id names a command still in flight on this channel.
    IdInFlight = 7,
    /// The range is outside every extent granted to this process for this operation
    /// (Moneta-D's permission check).
    PermissionDenied = 8,
    /// A zoned namespace refused the write: its zone is full, read only or offline, the
    /// write is not at the write pointer or runs past the zone, or no zone can be opened.
    ZoneRefused = 9,
}

// `from_code` reads a code as its index in `ALL`.
const _: () = {
    let mut i = 0;
    while i < ChannelStatus::ALL.len() {
        assert!(ChannelStatus::ALL[i] as usize == i, "ALL out of code order");
        i += 1;
    }
};

impl ChannelStatus {
    pub const ALL: [ChannelStatus; 10] = [
        ChannelStatus::Ok,
        ChannelStatus::OutOfRange,
        ChannelStatus::Misaligned,
        ChannelStatus::BadLength,
        ChannelStatus::IoError,
        ChannelStatus::BadOpcode,
        ChannelStatus::BadField,
        ChannelStatus::IdInFlight,
        ChannelStatus::PermissionDenied,
        ChannelStatus::ZoneRefused,
    ];

    /// The status of a code; an unknown code reads as `BadField`.
    pub fn from_code(code: u32) -> ChannelStatus {
        Self::ALL
            .get(code as usize)
            .copied()
            .unwrap_or(ChannelStatus::BadField)
    }

    /// The device's status as a channel reports it.
    pub fn of_device(status: Status) -> ChannelStatus {
        match status {
            Status::Ok => ChannelStatus::Ok,
            Status::OutOfRange => ChannelStatus::OutOfRange,
            Status::Misaligned => ChannelStatus::Misaligned,
            Status::BadLength => ChannelStatus::BadLength,
            Status::IoError => ChannelStatus::IoError,
            Status::BadOpcode => ChannelStatus::BadOpcode,
            Status::BadField => ChannelStatus::BadField,
            Status::TagConflict => ChannelStatus::IdInFlight,
            Status::ZoneBoundaryError
            | Status::ZoneIsFull
            | Status::ZoneIsReadOnly
            | Status::ZoneIsOffline
            | Status::ZoneInvalidWrite
            | Status::TooManyActiveZones
            | Status::TooManyOpenZones
            | Status::InvalidZoneStateTransition => ChannelStatus::ZoneRefused,
        }
    }

    /// The errno the C library returns (negated) for this status; 0 for `Ok`.
    pub fn errno(self) -> i32 {
        match self {
            ChannelStatus::Ok => 0,
            ChannelStatus::OutOfRange => libc::ERANGE,
            ChannelStatus::Misaligned | ChannelStatus::BadLength => libc::EINVAL,
            // A zoned block device's refused write is EIO to the kernel's callers too.
            ChannelStatus::IoError | ChannelStatus::ZoneRefused => libc::EIO,
            ChannelStatus::BadOpcode => libc::EOPNOTSUPP,
            ChannelStatus::BadField | ChannelStatus::IdInFlight => libc::EFAULT,
            ChannelStatus::PermissionDenied => libc::EACCES,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ChannelStatus::Ok => "ok",
            ChannelStatus::OutOfRange => "past the end of the device",
            ChannelStatus::Misaligned => "not aligned to the block size",
            ChannelStatus::BadLength => "length 0 or past the largest command",
            ChannelStatus::IoError => "the device's backing store failed",
            ChannelStatus::BadOpcode => "unknown opcode",
            ChannelStatus::BadField => "malformed ring entry (id or buffer)",
            ChannelStatus::IdInFlight => "id already in flight",
            ChannelStatus::PermissionDenied => "permission denied (no grant covers the range)",
            ChannelStatus::ZoneRefused => "refused by the zone (state, write pointer or limits)",
        }
    }
}
