//! The command protocols of the model, as bytes: the 64-bit command word and completion word
//! (Moneta's; DC Express sends the same word, and its reads complete in their data instead of
//! a completion word), and NVMe's 64-byte submission queue entry with PRP pointers.
//!
//! Both the driver (encoding) and the emulated device (decoding and validating) use these, so
//! they live with the device. Decoding never trusts the bits: every field is checked by the
//! device before anything is touched.

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
}

impl Status {
    pub const ALL: [Status; 8] = [
        Status::Ok,
        Status::OutOfRange,
        Status::Misaligned,
        Status::BadLength,
        Status::IoError,
        Status::BadOpcode,
        Status::BadField,
        Status::TagConflict,
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
        })
    }
}

impl From<&CommandError> for Status {
    fn from(e: &CommandError) -> Self {
        match e {
            CommandError::OutOfRange { .. } => Status::OutOfRange,
            CommandError::Misaligned { .. } => Status::Misaligned,
            CommandError::BadLength { .. } => Status::BadLength,
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
                _ => None,
            }
        }
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
        for opcode in 4..8 {
            let c = CommandWord {
                opcode,
                tag: 0,
                offset_blocks: 0,
                len_blocks: 1,
            };
            assert_eq!(CommandWord::decode(c.encode()).op(), None);
        }
    }
}
