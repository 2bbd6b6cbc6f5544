//! The command protocols of the model, as bytes: the 64-bit command word and completion word
//! (Moneta's; DC Express sends the same word, and its reads complete in their data instead of
//! a completion word), and NVMe's 64-byte submission queue entry with PRP pointers.
//!
//! Both the driver (encoding) and the emulated device (decoding and validating) use these, so
//! they live with the device. Decoding never trusts the bits: every field is checked by the
//! device before anything is touched.

use nvarray_model::zones::{ZoneAction, ZoneDescriptor, ZoneState, ZoneStatus};
use nvarray_model::CommandError;

/// What a command asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    Read,
    Write,
    /// Make every completed write durable (with a durable backing file); completes at once in
    /// the model.
    Flush,
    /// Deallocate (trim) a range: the flash pages wholly inside it are unmapped in the FTL,
    /// so the collector stops copying them. Completes at once, like a flush; the range's data
    /// stays as it was in the backing (NVMe leaves deallocated blocks' contents to the
    /// controller unless it advertises zeroes, and NBD makes trimmed data undefined).
    Deallocate,
    /// Zoned namespaces (NVMe ZNS, `[zns]`): write at the zone's write pointer, wherever it
    /// is, and learn where the data went (`DmaMemory::results`). The command's offset names
    /// the zone's first block.
    ZoneAppend,
    /// Zone Management Send: `action` on the zone whose first block the offset names, or on
    /// every zone it applies to (`all`, NVMe's Select All). Completes at once.
    ZoneManage {
        action: ZoneAction,
        all: bool,
    },
    /// Zone Management Receive's report zones: the zones from the one holding the offset, as
    /// many as the length holds, written into the tag's buffer in the ZNS layout
    /// (`zone_report`). `partial`: the header counts the zones reported rather than every
    /// zone from the first. Completes at once.
    ZoneReport {
        partial: bool,
    },
}

impl Opcode {
    /// Whether the device writes into the tag's buffer (a read's data, a zone report).
    pub fn fills_buffer(self) -> bool {
        matches!(self, Opcode::Read | Opcode::ZoneReport { .. })
    }

    /// Whether it is one of the zoned command set's commands.
    pub fn is_zoned(self) -> bool {
        matches!(
            self,
            Opcode::ZoneAppend | Opcode::ZoneManage { .. } | Opcode::ZoneReport { .. }
        )
    }
}

/// How a command ended. Anything but `Ok` left the data untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    OutOfRange,
    Misaligned,
    BadLength,
    /// The backing store failed (e.g. `fdatasync` error on flush).
    IoError,
    /// The opcode is not one the device knows.
    BadOpcode,
    /// A field of the command is malformed: a tag outside the device's tags, a PRP entry
    /// outside the queue pair's DMA memory.
    BadField,
    /// The command named a tag that already has a command in flight. This completion is the
    /// refused command's, not the tag's command in flight (which completes on its own later):
    /// a driver must not take it for that one's (NVMe: Command ID Conflict, generic status
    /// 03h).
    TagConflict,
    /// The zoned command set's refusals (`nvarray_model::zones::ZoneStatus`; NVMe status code
    /// type 1h, codes B8h-BFh in this order). With them the 4-bit code is full.
    ZoneBoundaryError,
    ZoneIsFull,
    ZoneIsReadOnly,
    ZoneIsOffline,
    ZoneInvalidWrite,
    TooManyActiveZones,
    TooManyOpenZones,
    InvalidZoneStateTransition,
}

impl Status {
    pub const ALL: [Status; 16] = [
        Status::Ok,
        Status::OutOfRange,
        Status::Misaligned,
        Status::BadLength,
        Status::IoError,
        Status::BadOpcode,
        Status::BadField,
        Status::TagConflict,
        Status::ZoneBoundaryError,
        Status::ZoneIsFull,
        Status::ZoneIsReadOnly,
        Status::ZoneIsOffline,
        Status::ZoneInvalidWrite,
        Status::TooManyActiveZones,
        Status::TooManyOpenZones,
        Status::InvalidZoneStateTransition,
    ];

    /// The 4-bit code carried in completion words.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The status of a 4-bit code; unknown codes read as `BadField`.
    pub fn from_code(code: u8) -> Status {
        Status::ALL
            .get(usize::from(code))
            .copied()
            .unwrap_or(Status::BadField)
    }

    pub fn is_ok(self) -> bool {
        self == Status::Ok
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::OutOfRange => "offset + length beyond the end of the device",
            Status::Misaligned => "offset or length not a multiple of the block size",
            Status::BadLength => "length zero or above the maximum transfer",
            Status::IoError => "backing store I/O error",
            Status::BadOpcode => "unknown opcode",
            Status::BadField => "malformed command field",
            Status::TagConflict => "tag already has a command in flight (command refused)",
            Status::ZoneBoundaryError => {
                "zone boundary error: the write runs past the zone's capacity"
            }
            Status::ZoneIsFull => "zone is full",
            Status::ZoneIsReadOnly => "zone is read only",
            Status::ZoneIsOffline => "zone is offline",
            Status::ZoneInvalidWrite => "zone invalid write: not at the zone's write pointer",
            Status::TooManyActiveZones => "too many active zones",
            Status::TooManyOpenZones => "too many open zones",
            Status::InvalidZoneStateTransition => "invalid zone state transition",
        })
    }
}

impl From<ZoneStatus> for Status {
    fn from(z: ZoneStatus) -> Self {
        match z {
            ZoneStatus::LbaOutOfRange => Status::OutOfRange,
            ZoneStatus::InvalidField => Status::BadField,
            ZoneStatus::ZoneBoundaryError => Status::ZoneBoundaryError,
            ZoneStatus::ZoneIsFull => Status::ZoneIsFull,
            ZoneStatus::ZoneIsReadOnly => Status::ZoneIsReadOnly,
            ZoneStatus::ZoneIsOffline => Status::ZoneIsOffline,
            ZoneStatus::ZoneInvalidWrite => Status::ZoneInvalidWrite,
            ZoneStatus::TooManyActiveZones => Status::TooManyActiveZones,
            ZoneStatus::TooManyOpenZones => Status::TooManyOpenZones,
            ZoneStatus::InvalidZoneStateTransition => Status::InvalidZoneStateTransition,
        }
    }
}

impl From<&CommandError> for Status {
    fn from(e: &CommandError) -> Self {
        match e {
            CommandError::OutOfRange { .. } => Status::OutOfRange,
            CommandError::Misaligned { .. } => Status::Misaligned,
            CommandError::BadLength { .. } => Status::BadLength,
            // The device cannot take the write (its maps are past the machine's budget for
            // them, logged by the device core): an error of the device, like a backing's.
            CommandError::MapBudget(_) => Status::IoError,
        }
    }
}

/// Moneta command word (Moneta: "issue command with one 64-bit write"; per-tag DMA buffers,
/// so no address travels in it). Layout, from the top bit:
///
/// | bits  | field |
/// |-------|-------|
/// | 63    | valid (always 1, so a word is never 0) |
/// | 62:60 | opcode (`OPCODE_*`) |
/// | 59:48 | tag |
/// | 47:34 | length in blocks, minus one |
/// | 33:0  | offset in blocks |
pub mod moneta {
    use super::*;

    pub const VALID: u64 = 1 << 63;
    pub const OPCODE_READ: u64 = 0;
    pub const OPCODE_WRITE: u64 = 1;
    pub const OPCODE_FLUSH: u64 = 2;
    /// Not Moneta's (its devices had no map to trim): nvarray's, for flash behind an FTL.
    pub const OPCODE_DEALLOCATE: u64 = 3;
    /// The zoned command set, nvarray's too (`Opcode::ZoneAppend` and the rest): the offset
    /// names the zone's first block (report: the first zone's), the length is the data's
    /// (report: the buffer's, in blocks).
    pub const OPCODE_ZONE_APPEND: u64 = 4;
    /// Zone management: the length field carries the action, `ZONE_ACTION_*` (NVMe's codes)
    /// plus `ZONE_SELECT_ALL`, as a block count.
    pub const OPCODE_ZONE_MANAGE: u64 = 5;
    pub const OPCODE_ZONE_REPORT: u64 = 6;
    /// Set in a zone management word's action for Select All.
    pub const ZONE_SELECT_ALL: u64 = 8;
    pub const TAG_BITS: u32 = 12;
    pub const LEN_BITS: u32 = 14;
    pub const OFFSET_BITS: u32 = 34;
    /// Largest offset, in blocks, the word can carry.
    pub const OFFSET_BLOCKS_MAX: u64 = (1 << OFFSET_BITS) - 1;
    /// Largest length, in blocks.
    pub const LEN_BLOCKS_MAX: u64 = 1 << LEN_BITS;

    /// A decoded command word. Lengths and offsets are in blocks.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CommandWord {
        pub opcode: u64,
        pub tag: u16,
        pub offset_blocks: u64,
        pub len_blocks: u64,
    }

    impl CommandWord {
        /// The word for this command. Fields must fit (the driver checks before encoding).
        pub fn encode(self) -> u64 {
            assert!(self.opcode < 8);
            assert!(u32::from(self.tag) < (1 << TAG_BITS));
            assert!((1..=LEN_BLOCKS_MAX).contains(&self.len_blocks));
            assert!(self.offset_blocks <= OFFSET_BLOCKS_MAX);
            VALID
                | (self.opcode << 60)
                | (u64::from(self.tag) << 48)
                | ((self.len_blocks - 1) << OFFSET_BITS)
                | self.offset_blocks
        }

        pub fn decode(word: u64) -> CommandWord {
            CommandWord {
                opcode: (word >> 60) & 0x7,
                tag: ((word >> 48) & ((1 << TAG_BITS) - 1)) as u16,
                len_blocks: ((word >> OFFSET_BITS) & ((1 << LEN_BITS) - 1)) + 1,
                offset_blocks: word & OFFSET_BLOCKS_MAX,
            }
        }

        /// What the opcode asks for.
        pub fn op(self) -> Option<Opcode> {
            match self.opcode {
                OPCODE_READ => Some(Opcode::Read),
                OPCODE_WRITE => Some(Opcode::Write),
                OPCODE_FLUSH => Some(Opcode::Flush),
                OPCODE_DEALLOCATE => Some(Opcode::Deallocate),
                OPCODE_ZONE_APPEND => Some(Opcode::ZoneAppend),
                OPCODE_ZONE_MANAGE => Some(Opcode::ZoneManage {
                    action: nvme::zone_action(self.len_blocks as u8 & 0x7)?,
                    all: self.len_blocks & ZONE_SELECT_ALL != 0,
                }),
                OPCODE_ZONE_REPORT => Some(Opcode::ZoneReport { partial: false }),
                _ => None,
            }
        }
    }

    /// The length field of a zone management word for `action`.
    pub fn zone_manage_blocks(action: ZoneAction, all: bool) -> u64 {
        u64::from(nvme::zone_action_code(action)) | if all { ZONE_SELECT_ALL } else { 0 }
    }

    /// Completion word: valid bit, status code in bits 19:16, tag in bits 11:0.
    pub fn completion(tag: u16, status: Status) -> u64 {
        VALID | (u64::from(status.code()) << 16) | u64::from(tag)
    }

    pub fn decode_completion(word: u64) -> (u16, Status) {
        (
            (word & ((1 << TAG_BITS) - 1)) as u16,
            Status::from_code(((word >> 16) & 0xf) as u8),
        )
    }
}

/// NVMe submission queue entry and PRPs (NVMe base specification §4.2, §4.3; OpenExpress's
/// "SQ entry fetch" and "PRP engine"). PRP entries are I/O virtual addresses in the queue
/// pair's DMA memory: `DATA_IOVA` + offset for data pages, `LIST_IOVA` + offset for PRP list
/// pages.
pub mod nvme {
    use super::*;

    pub const OPCODE_FLUSH: u8 = 0x00;
    pub const OPCODE_WRITE: u8 = 0x01;
    pub const OPCODE_READ: u8 = 0x02;
    /// Dataset Management (NVM command set, opcode 09h), always as a deallocate. NVMe carries
    /// a list of 16-byte ranges in a data buffer, with their number in dword 10 and the
    /// Attribute Deallocate bit in dword 11; the emulator's device takes exactly one range,
    /// in the fields a read uses (starting LBA in dwords 10-11, zero-based block count in
    /// dword 12), so a deallocate needs no DMA.
    pub const OPCODE_DATASET_MANAGEMENT: u8 = 0x09;
    /// Blocks one read or write moves at most: dword 12's 16-bit, zero-based block count.
    pub const BLOCKS_PER_COMMAND_MAX: u64 = 1 << 16;
    /// Base I/O virtual address of the tags' data buffers.
    pub const DATA_IOVA: u64 = 1 << 40;
    /// Base I/O virtual address of the tags' PRP list pages.
    pub const LIST_IOVA: u64 = 2 << 40;
    /// Status codes (generic command status, NVMe §4.6.1.2.1), shifted into the 15-bit field
    /// as status code (bits 7:0) with type 0.
    pub const SC_SUCCESS: u16 = 0x00;
    pub const SC_INVALID_OPCODE: u16 = 0x01;
    pub const SC_INVALID_FIELD: u16 = 0x02;
    /// NVMe base specification, generic command status 03h.
    pub const SC_COMMAND_ID_CONFLICT: u16 = 0x03;
    pub const SC_DATA_TRANSFER_ERROR: u16 = 0x04;
    pub const SC_LBA_OUT_OF_RANGE: u16 = 0x80;
    /// Status code type 1h (command specific), in bits 10:8 of the status field.
    pub const SCT_COMMAND_SPECIFIC: u16 = 0x1 << 8;

    /// The Zoned Namespace Command Set's I/O commands (NVMe ZNS specification, 1.1).
    pub const OPCODE_ZONE_MANAGEMENT_SEND: u8 = 0x79;
    pub const OPCODE_ZONE_MANAGEMENT_RECEIVE: u8 = 0x7a;
    pub const OPCODE_ZONE_APPEND: u8 = 0x7d;
    /// Zone Management Send's action (dword 13 bits 7:0) and Select All (bit 8).
    pub const ZSA_CLOSE: u8 = 0x1;
    pub const ZSA_FINISH: u8 = 0x2;
    pub const ZSA_OPEN: u8 = 0x3;
    pub const ZSA_RESET: u8 = 0x4;
    pub const ZSA_SELECT_ALL: u32 = 1 << 8;
    /// Zone Management Receive's action (dword 13 bits 7:0): report zones; its Partial
    /// Report bit (dword 13 bit 16). Its buffer's size is dword 12, in dwords, zero-based.
    pub const ZRA_REPORT_ZONES: u8 = 0x0;
    pub const ZRA_PARTIAL: u32 = 1 << 16;
    /// The report's header and each zone descriptor are 64 bytes.
    pub const ZONE_REPORT_ENTRY_BYTES: usize = 64;

    /// Zone type 2h: sequential write required (report zones' byte 0).
    const ZONE_TYPE_SEQUENTIAL_WRITE_REQUIRED: u8 = 0x2;

    /// Writes a report zones answer into `buf`: the header's zone count (`zones`), then as
    /// many of `descriptors` as fit, each in the ZNS layout (type; state in the upper nibble
    /// of byte 1; capacity, first block and write pointer at bytes 8, 16 and 24). Returns how
    /// many descriptors it wrote.
    pub fn write_zone_report(buf: &mut [u8], zones: u64, descriptors: &[ZoneDescriptor]) -> usize {
        const E: usize = ZONE_REPORT_ENTRY_BYTES;
        let room = (buf.len() / E).saturating_sub(1);
        let n = room.min(descriptors.len());
        let used = (n + 1) * E;
        let used = used.min(buf.len());
        buf[..used].fill(0);
        if buf.len() >= 8 {
            buf[..8].copy_from_slice(&zones.to_le_bytes());
        }
        for (i, d) in descriptors[..n].iter().enumerate() {
            let e = &mut buf[(i + 1) * E..(i + 2) * E];
            e[0] = ZONE_TYPE_SEQUENTIAL_WRITE_REQUIRED;
            e[1] = d.state.code() << 4;
            e[8..16].copy_from_slice(&d.capacity_blocks.to_le_bytes());
            e[16..24].copy_from_slice(&d.start_block.to_le_bytes());
            e[24..32].copy_from_slice(&d.write_pointer.to_le_bytes());
        }
        n
    }

    /// Reads a report zones answer (`write_zone_report`'s inverse): the header's zone count
    /// and the descriptors `buf` holds, at most `max` and at most the count. `None` for a state the ZNS
    /// specification does not define.
    pub fn read_zone_report(buf: &[u8], max: usize) -> Option<(u64, Vec<ZoneDescriptor>)> {
        const E: usize = ZONE_REPORT_ENTRY_BYTES;
        let le = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let zones = le(buf.get(..8)?);
        let n = (buf.len() / E)
            .saturating_sub(1)
            .min(max)
            .min(usize::try_from(zones).unwrap_or(usize::MAX));
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let e = &buf[(i + 1) * E..(i + 2) * E];
            out.push(ZoneDescriptor {
                state: ZoneState::from_code(e[1] >> 4)?,
                capacity_blocks: le(&e[8..16]),
                start_block: le(&e[16..24]),
                write_pointer: le(&e[24..32]),
            });
        }
        Some((zones, out))
    }

    /// The action of a Zone Management Send code.
    pub fn zone_action(code: u8) -> Option<ZoneAction> {
        match code {
            ZSA_CLOSE => Some(ZoneAction::Close),
            ZSA_FINISH => Some(ZoneAction::Finish),
            ZSA_OPEN => Some(ZoneAction::Open),
            ZSA_RESET => Some(ZoneAction::Reset),
            _ => None,
        }
    }

    pub fn zone_action_code(action: ZoneAction) -> u8 {
        match action {
            ZoneAction::Close => ZSA_CLOSE,
            ZoneAction::Finish => ZSA_FINISH,
            ZoneAction::Open => ZSA_OPEN,
            ZoneAction::Reset => ZSA_RESET,
        }
    }

    /// The 64-byte submission queue entry (the fields an NVM read, write or flush uses).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    #[repr(C, align(64))]
    pub struct Sqe {
        pub opcode: u8,
        pub flags: u8,
        pub cid: u16,
        pub nsid: u32,
        pub cdw2: u32,
        pub cdw3: u32,
        pub mptr: u64,
        pub prp1: u64,
        pub prp2: u64,
        /// Starting LBA (dwords 10 and 11).
        pub slba: u64,
        /// Number of logical blocks, zero-based (dword 12 bits 15:0).
        pub cdw12: u32,
        pub cdw13: u32,
        pub cdw14: u32,
        pub cdw15: u32,
    }

    const _: () = assert!(std::mem::size_of::<Sqe>() == 64);

    /// Dword 12's Directive Type field (bits 23:20) and the Data Placement type (NVMe
    /// Flexible Data Placement, TP4146): a write with it carries its placement handle in
    /// dword 13's Directive Specific field (bits 31:16).
    pub const DTYPE_SHIFT: u32 = 20;
    pub const DTYPE_DATA_PLACEMENT: u32 = 0x2;

    /// The directive an entry carries.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Directive {
        None,
        /// Data placement, with its placement handle.
        Placement(u16),
        /// A directive type the device does not support.
        Unsupported(u32),
    }

    pub fn directive(sqe: &Sqe) -> Directive {
        match (sqe.cdw12 >> DTYPE_SHIFT) & 0xf {
            0 => Directive::None,
            DTYPE_DATA_PLACEMENT => Directive::Placement((sqe.cdw13 >> 16) as u16),
            other => Directive::Unsupported(other),
        }
    }

    /// Sets a write's placement handle in `sqe` (the driver's half of `directive`).
    pub fn set_placement(sqe: &mut Sqe, handle: u16) {
        sqe.cdw12 |= DTYPE_DATA_PLACEMENT << DTYPE_SHIFT;
        sqe.cdw13 = (sqe.cdw13 & 0xffff) | (u32::from(handle) << 16);
    }

    /// NVMe status of a device status.
    pub fn status_code(status: Status) -> u16 {
        match status {
            Status::Ok => SC_SUCCESS,
            Status::OutOfRange => SC_LBA_OUT_OF_RANGE,
            Status::BadOpcode => SC_INVALID_OPCODE,
            Status::IoError => SC_DATA_TRANSFER_ERROR,
            Status::TagConflict => SC_COMMAND_ID_CONFLICT,
            // NVMe reports these as "invalid field"; the emulator keeps the exact reason in
            // the otherwise unused dword 0 (see `Cqe::result`).
            Status::Misaligned | Status::BadLength | Status::BadField => SC_INVALID_FIELD,
            // B8h-BFh in `Status::ALL`'s order.
            zoned => {
                SCT_COMMAND_SPECIFIC
                    | (0xb8 + u16::from(zoned.code() - Status::ZoneBoundaryError.code()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::moneta::*;
    use super::*;

    proptest! {
        #[test]
        fn moneta_words_round_trip(
            opcode in 0u64..8,
            tag in 0u16..(1 << TAG_BITS),
            len_blocks in 1..=LEN_BLOCKS_MAX,
            offset_blocks in 0..=OFFSET_BLOCKS_MAX,
        ) {
            let c = CommandWord { opcode, tag, offset_blocks, len_blocks };
            let w = c.encode();
            prop_assert!(w != 0);
            prop_assert_eq!(CommandWord::decode(w), c);
        }

        #[test]
        fn completion_words_round_trip(tag in 0u16..(1 << TAG_BITS), code in 0usize..Status::ALL.len()) {
            let status = Status::ALL[code];
            prop_assert_eq!(decode_completion(completion(tag, status)), (tag, status));
        }
    }

    #[test]
    fn unknown_opcodes_decode_to_none() {
        let word = |opcode, len_blocks| CommandWord {
            opcode,
            tag: 0,
            offset_blocks: 0,
            len_blocks,
        };
        assert_eq!(CommandWord::decode(word(7, 1).encode()).op(), None);
        // Zone management with an action NVMe does not define.
        for action in [5, 6, 7, ZONE_SELECT_ALL] {
            assert_eq!(
                CommandWord::decode(word(OPCODE_ZONE_MANAGE, action).encode()).op(),
                None
            );
        }
    }

    #[test]
    fn zone_management_words_carry_their_action() {
        for action in [
            ZoneAction::Open,
            ZoneAction::Close,
            ZoneAction::Finish,
            ZoneAction::Reset,
        ] {
            for all in [false, true] {
                let c = CommandWord {
                    opcode: OPCODE_ZONE_MANAGE,
                    tag: 3,
                    offset_blocks: 64,
                    len_blocks: zone_manage_blocks(action, all),
                };
                assert_eq!(
                    CommandWord::decode(c.encode()).op(),
                    Some(Opcode::ZoneManage { action, all })
                );
            }
        }
    }

    /// The zone statuses are NVMe's B8h-BFh with status code type 1h, in the specification's
    /// order.
    #[test]
    fn zone_statuses_are_nvme_command_specific_codes() {
        let codes: Vec<u16> = Status::ALL[8..]
            .iter()
            .map(|&s| nvme::status_code(s))
            .collect();
        assert_eq!(codes, (0x1b8..=0x1bf).collect::<Vec<u16>>());
        for z in [
            ZoneStatus::ZoneBoundaryError,
            ZoneStatus::ZoneIsFull,
            ZoneStatus::ZoneIsReadOnly,
            ZoneStatus::ZoneIsOffline,
            ZoneStatus::ZoneInvalidWrite,
            ZoneStatus::TooManyActiveZones,
            ZoneStatus::TooManyOpenZones,
            ZoneStatus::InvalidZoneStateTransition,
        ] {
            let (sct, sc) = z.code();
            assert_eq!(
                nvme::status_code(Status::from(z)),
                (u16::from(sct) << 8) | u16::from(sc),
                "{z:?}"
            );
        }
    }
}
