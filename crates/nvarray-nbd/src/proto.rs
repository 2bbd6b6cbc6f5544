//! The NBD wire format: constants, the fixed-size headers both phases exchange, and the checks
//! a transmission request must pass before it touches the device. Pure: bytes in, values out,
//! no I/O, so it can be property-tested and fuzzed (`fuzz/`).
//!
//! Numbers and rules are from the NBD protocol (the NBD project's `doc/proto.md`); all integers
//! are big-endian on the wire.

use thiserror::Error;

/// "NBDMAGIC": first 8 bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": newstyle negotiation, and the magic of every option request.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of an option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
const REP_FLAG_ERROR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR | 1;
pub const REP_ERR_POLICY: u32 = REP_FLAG_ERROR | 2;
pub const REP_ERR_INVALID: u32 = REP_FLAG_ERROR | 3;
pub const REP_ERR_UNKNOWN: u32 = REP_FLAG_ERROR | 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_FLAG_ERROR | 7;

// Information types of NBD_OPT_INFO / NBD_OPT_GO.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;

// Structured reply chunks.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;

/// Error values of the transmission phase (a fixed subset of errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum NbdErrno {
    Perm = 1,
    Io = 5,
    Inval = 22,
    NoSpc = 28,
    Overflow = 75,
    Shutdown = 108,
}

/// Largest payload a request or a read reply may carry: the spec's 2^25, which every client
/// may assume and which nvarray advertises as its maximum.
pub const PAYLOAD_BYTES_MAX: u32 = 1 << 25;
/// Largest option request we read. Options carry at most an export name (4096 bytes at most)
/// and a list of information requests; anything longer is a broken or hostile client.
pub const OPTION_BYTES_MAX: u32 = 64 * 1024;
/// Options one connection may send before it is cut off (clients send a handful).
pub const OPTIONS_MAX: u32 = 256;
/// Longest string (export name, message) the spec allows.
pub const STRING_BYTES_MAX: usize = 4096;

pub const REQUEST_HEADER_BYTES: usize = 28;
pub const OPTION_HEADER_BYTES: usize = 16;

// A read chunk announces its offset and data in one 32-bit length; an error message's length
// is 16 bits on the wire; `INFO`/`GO` with the longest export name is a valid option.
const _: () = assert!(
    PAYLOAD_BYTES_MAX as u64 + 8 <= u32::MAX as u64,
    "an offset-data chunk's length fits its field"
);
const _: () = assert!(
    STRING_BYTES_MAX <= u16::MAX as usize,
    "an error message's length fits its field"
);
const _: () = assert!(
    OPTION_BYTES_MAX as usize >= 4 + STRING_BYTES_MAX + 2,
    "an INFO or GO naming the longest export is not cut off"
);

/// A transmission request header, as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub magic: u32,
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset_bytes: u64,
    pub len_bytes: u32,
}

impl RequestHeader {
    pub fn decode(b: &[u8; REQUEST_HEADER_BYTES]) -> RequestHeader {
        RequestHeader {
            magic: u32::from_be_bytes(b[0..4].try_into().expect("4 bytes")),
            flags: u16::from_be_bytes(b[4..6].try_into().expect("2 bytes")),
            kind: u16::from_be_bytes(b[6..8].try_into().expect("2 bytes")),
            cookie: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
            offset_bytes: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
            len_bytes: u32::from_be_bytes(b[24..28].try_into().expect("4 bytes")),
        }
    }

    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut b = [0u8; REQUEST_HEADER_BYTES];
        b[0..4].copy_from_slice(&self.magic.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset_bytes.to_be_bytes());
        b[24..28].copy_from_slice(&self.len_bytes.to_be_bytes());
        b
    }

    /// Bytes of payload that follow this header on the wire (only writes carry one).
    pub fn payload_bytes(&self) -> u32 {
        if self.kind == CMD_WRITE {
            self.len_bytes
        } else {
            0
        }
    }
}

/// What the export allows; requests are checked against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportLimits {
    pub size_bytes: u64,
    /// Minimum block size: every offset and length must be a multiple (the device's block).
    pub block_bytes: u32,
    pub read_only: bool,
}

/// A checked request: what the connection should do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckedRequest {
    Read {
        offset_bytes: u64,
        len_bytes: u32,
    },
    Write {
        offset_bytes: u64,
        len_bytes: u32,
        fua: bool,
    },
    WriteZeroes {
        offset_bytes: u64,
        len_bytes: u32,
        fua: bool,
    },
    Trim {
        offset_bytes: u64,
        len_bytes: u32,
        fua: bool,
    },
    Flush,
    Disconnect,
}

/// Why a request is refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RequestError {
    /// The stream is out of step (bad magic) or the payload is too big to skip: the only
    /// safe answer is to hang up.
    #[error("{0}; disconnecting")]
    Fatal(String),
    /// A well-formed request the export refuses; answered with this error, connection kept.
    /// A write's payload must still be read (and dropped) before the next request.
    #[error("{message}")]
    Refused { errno: NbdErrno, message: String },
}

fn refused(errno: NbdErrno, message: String) -> RequestError {
    RequestError::Refused { errno, message }
}

/// Checks a request against the export and the spec (flags valid for the command, offset and
/// length aligned and inside the export, payload bounded, nothing that writes on a read-only
/// export). `structured`: the connection negotiated structured replies, which changes the
/// error for a read over the largest payload. Any input gives an answer; none panics.
pub fn check_request(
    h: &RequestHeader,
    limits: &ExportLimits,
    structured: bool,
) -> Result<CheckedRequest, RequestError> {
    check_framing(h)?;
    let name = check_command(h)?;
    match h.kind {
        CMD_DISC => return Ok(CheckedRequest::Disconnect),
        CMD_FLUSH => return Ok(CheckedRequest::Flush),
        _ => {}
    }
    check_writable(h, limits, name)?;
    check_read_size(h, structured)?;
    check_aligned(h, limits, name)?;
    check_inside_export(h, limits, name)?;
    // What the connection relies on from here: the range is inside the export and aligned, a
    // read's or write's data is no larger than one payload, and only reads reach a read-only
    // export.
    debug_assert!(
        h.offset_bytes
            .checked_add(u64::from(h.len_bytes))
            .is_some_and(|end| end <= limits.size_bytes),
        "checked {name} outside the export: expected {} + {} <= {}",
        h.offset_bytes,
        h.len_bytes,
        limits.size_bytes
    );
    debug_assert!(
        h.offset_bytes.is_multiple_of(u64::from(limits.block_bytes))
            && u64::from(h.len_bytes).is_multiple_of(u64::from(limits.block_bytes)),
        "checked {name} unaligned: expected offset {} and length {} multiples of {}",
        h.offset_bytes,
        h.len_bytes,
        limits.block_bytes
    );
    debug_assert!(
        !matches!(h.kind, CMD_READ | CMD_WRITE) || h.len_bytes <= PAYLOAD_BYTES_MAX,
        "checked {name} carries more than the largest payload: expected at most \
         {PAYLOAD_BYTES_MAX} bytes, found {}",
        h.len_bytes
    );
    debug_assert!(
        h.kind == CMD_READ || !limits.read_only,
        "checked {name} on a read-only export: expected only reads, found command {}",
        h.kind
    );
    Ok(checked(h))
}

/// The checks whose failure leaves the stream out of step (`RequestError::Fatal`): the magic,
/// and a write payload too big to skip.
fn check_framing(h: &RequestHeader) -> Result<(), RequestError> {
    if h.magic != REQUEST_MAGIC {
        return Err(RequestError::Fatal(format!(
            "bad request magic {:#010x} (expected {REQUEST_MAGIC:#010x})",
            h.magic
        )));
    }
    if h.kind == CMD_WRITE && h.len_bytes > PAYLOAD_BYTES_MAX {
        return Err(RequestError::Fatal(format!(
            "write payload of {} bytes is over the {PAYLOAD_BYTES_MAX}-byte maximum",
            h.len_bytes
        )));
    }
    Ok(())
}

/// Checks that the command is one the server serves and that its flags are valid for it.
/// Returns the command's name, for messages.
fn check_command(h: &RequestHeader) -> Result<&'static str, RequestError> {
    // FUA is valid on every command once advertised ("the server MUST accept it on all
    // commands", proto.md; older qemu sets it on FLUSH): a read or a flush ignores it, since
    // its reply already waits for the device.
    let (name, flags_allowed) = match h.kind {
        CMD_READ => ("read", CMD_FLAG_FUA),
        CMD_WRITE => ("write", CMD_FLAG_FUA),
        CMD_DISC => ("disconnect", CMD_FLAG_FUA),
        CMD_FLUSH => ("flush", CMD_FLAG_FUA),
        CMD_TRIM => ("trim", CMD_FLAG_FUA),
        CMD_WRITE_ZEROES => ("write zeroes", CMD_FLAG_FUA | CMD_FLAG_NO_HOLE),
        other => {
            return Err(refused(
                NbdErrno::Inval,
                format!("unknown or unadvertised command {other}"),
            ))
        }
    };
    if h.flags & !flags_allowed != 0 {
        return Err(refused(
            NbdErrno::Inval,
            format!("flags {:#06x} are not valid for {name}", h.flags),
        ));
    }
    Ok(name)
}

/// Refuses a command that changes data (anything but a read) on a read-only export.
fn check_writable(
    h: &RequestHeader,
    limits: &ExportLimits,
    name: &str,
) -> Result<(), RequestError> {
    let writes = h.kind != CMD_READ;
    if writes && limits.read_only {
        return Err(refused(
            NbdErrno::Perm,
            format!("{name} on a read-only export"),
        ));
    }
    Ok(())
}

/// Refuses a read over the largest payload.
fn check_read_size(h: &RequestHeader, structured: bool) -> Result<(), RequestError> {
    let len_bytes = h.len_bytes;
    if h.kind == CMD_READ && len_bytes > PAYLOAD_BYTES_MAX {
        // With simple replies the client must not ask (the reply would carry more than the
        // maximum payload): EINVAL, a malformed request. With structured replies the reply's
        // size is the server's to choose, and proto.md ("NBD_CMD_READ") lets a server "reject
        // large read requests up front with NBD_EOVERFLOW", which tells the client to retry
        // with smaller ones.
        let errno = if structured {
            NbdErrno::Overflow
        } else {
            NbdErrno::Inval
        };
        return Err(refused(
            errno,
            format!(
                "read of {len_bytes} bytes is over the {PAYLOAD_BYTES_MAX}-byte maximum; \
                 split it into smaller reads"
            ),
        ));
    }
    Ok(())
}

/// Refuses an offset or a length that is not a multiple of the export's minimum block size.
fn check_aligned(h: &RequestHeader, limits: &ExportLimits, name: &str) -> Result<(), RequestError> {
    let (offset_bytes, len_bytes) = (h.offset_bytes, h.len_bytes);
    let block = u64::from(limits.block_bytes);
    if !offset_bytes.is_multiple_of(block) || !u64::from(len_bytes).is_multiple_of(block) {
        return Err(refused(
            NbdErrno::Inval,
            format!(
                "{name} at offset {offset_bytes} of {len_bytes} bytes is not aligned to the \
                 export's {block}-byte minimum block size"
            ),
        ));
    }
    Ok(())
}

/// Refuses a range that ends beyond the export (or overflows).
fn check_inside_export(
    h: &RequestHeader,
    limits: &ExportLimits,
    name: &str,
) -> Result<(), RequestError> {
    let (offset_bytes, len_bytes) = (h.offset_bytes, h.len_bytes);
    if offset_bytes
        .checked_add(u64::from(len_bytes))
        .is_none_or(|end| end > limits.size_bytes)
    {
        // The spec: ENOSPC for writes past the end, EINVAL for reads and trims.
        let errno = match h.kind {
            CMD_WRITE | CMD_WRITE_ZEROES => NbdErrno::NoSpc,
            _ => NbdErrno::Inval,
        };
        return Err(refused(
            errno,
            format!(
                "{name} at offset {offset_bytes} of {len_bytes} bytes is beyond the end of the \
                 {}-byte export",
                limits.size_bytes
            ),
        ));
    }
    Ok(())
}

/// The checked request of a read, write, trim or write zeroes that passed every check.
fn checked(h: &RequestHeader) -> CheckedRequest {
    let fua = h.flags & CMD_FLAG_FUA != 0;
    let (offset_bytes, len_bytes) = (h.offset_bytes, h.len_bytes);
    match h.kind {
        CMD_READ => CheckedRequest::Read {
            offset_bytes,
            len_bytes,
        },
        CMD_WRITE => CheckedRequest::Write {
            offset_bytes,
            len_bytes,
            fua,
        },
        CMD_TRIM => CheckedRequest::Trim {
            offset_bytes,
            len_bytes,
            fua,
        },
        _ => CheckedRequest::WriteZeroes {
            offset_bytes,
            len_bytes,
            fua,
        },
    }
}

/// An option request header (the data follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    pub magic: u64,
    pub option: u32,
    pub len_bytes: u32,
}

impl OptionHeader {
    pub fn decode(b: &[u8; OPTION_HEADER_BYTES]) -> OptionHeader {
        OptionHeader {
            magic: u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")),
            option: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            len_bytes: u32::from_be_bytes(b[12..16].try_into().expect("4 bytes")),
        }
    }
}

/// A string as the protocol allows it (proto.md, "Conventions"): UTF-8, no NUL, at most
/// `STRING_BYTES_MAX` bytes. `Err` says which rule `what` broke.
pub fn parse_string<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str, String> {
    if bytes.len() > STRING_BYTES_MAX {
        return Err(format!(
            "{what} of {} bytes is longer than the protocol's {STRING_BYTES_MAX}",
            bytes.len()
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8"))?;
    if text.contains('\0') {
        return Err(format!("{what} contains a NUL character"));
    }
    Ok(text)
}

/// The data of `NBD_OPT_INFO` / `NBD_OPT_GO`: an export name and the information the client
/// asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub requests: Vec<u16>,
}

/// Parses `NBD_OPT_INFO` / `NBD_OPT_GO` data; `Err` carries the message for
/// `NBD_REP_ERR_INVALID`.
pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest, String> {
    let name_len = data
        .get(0..4)
        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
        .ok_or("option data too short for the export name length")?;
    if name_len > STRING_BYTES_MAX {
        return Err(format!(
            "export name of {name_len} bytes is longer than the protocol's {STRING_BYTES_MAX}"
        ));
    }
    let name = data
        .get(4..4 + name_len)
        .ok_or("option data too short for the export name")?;
    let name = parse_string(name, "export name")?.to_string();
    let rest = &data[4 + name_len..];
    let count = rest
        .get(0..2)
        .map(|b| u16::from_be_bytes(b.try_into().expect("2 bytes")) as usize)
        .ok_or("option data too short for the number of information requests")?;
    let list = &rest[2..];
    if list.len() != count * 2 {
        return Err(format!(
            "{count} information requests announced but {} bytes follow",
            list.len()
        ));
    }
    let requests = list
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    Ok(InfoRequest { name, requests })
}

/// Appends an option reply (header and data).
pub fn put_option_reply(out: &mut Vec<u8>, option: u32, reply: u32, data: &[u8]) {
    out.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Appends a simple reply header (a successful read's data follows it).
pub fn put_simple_reply(out: &mut Vec<u8>, cookie: u64, error: u32) {
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
}

/// Bytes of a structured reply chunk's header.
pub const CHUNK_HEADER_BYTES: usize = 20;

/// Appends a structured reply chunk header announcing `len_bytes` of payload.
pub fn put_chunk_header(out: &mut Vec<u8>, cookie: u64, flags: u16, kind: u16, len_bytes: u32) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&len_bytes.to_be_bytes());
}

/// Appends a structured error chunk (final) with a message for the user.
pub fn put_error_chunk(out: &mut Vec<u8>, cookie: u64, errno: NbdErrno, message: &str) {
    let message = truncate_utf8(message, STRING_BYTES_MAX);
    let start = out.len();
    put_chunk_header(
        out,
        cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        6 + message.len() as u32,
    );
    out.extend_from_slice(&(errno as u32).to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message.as_bytes());
    // The client reads exactly the length the header announced, then the next reply.
    debug_assert_eq!(
        out.len() - start,
        CHUNK_HEADER_BYTES + 6 + message.len(),
        "error chunk size: expected a {CHUNK_HEADER_BYTES}-byte header and {} announced bytes, \
         found {} bytes in all",
        6 + message.len(),
        out.len() - start
    );
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMITS: ExportLimits = ExportLimits {
        size_bytes: 1 << 20,
        block_bytes: 512,
        read_only: false,
    };

    fn header(kind: u16, flags: u16, offset_bytes: u64, len_bytes: u32) -> RequestHeader {
        RequestHeader {
            magic: REQUEST_MAGIC,
            flags,
            kind,
            cookie: 7,
            offset_bytes,
            len_bytes,
        }
    }

    /// `expected`: Ok(command) or the errno (None for a fatal error).
    fn check(
        h: RequestHeader,
        limits: ExportLimits,
        expected: Result<CheckedRequest, Option<NbdErrno>>,
    ) {
        check_replying(h, limits, false, expected)
    }

    /// `check` on a connection with structured replies or not.
    fn check_replying(
        h: RequestHeader,
        limits: ExportLimits,
        structured: bool,
        expected: Result<CheckedRequest, Option<NbdErrno>>,
    ) {
        let got = check_request(&h, &limits, structured).map_err(|e| match e {
            RequestError::Fatal(_) => None,
            RequestError::Refused { errno, .. } => Some(errno),
        });
        assert_eq!(got, expected, "{h:?}");
    }

    #[test]
    fn requests_are_checked_like_the_spec_says() {
        use NbdErrno::*;
        let read = |o, l| {
            Ok(CheckedRequest::Read {
                offset_bytes: o,
                len_bytes: l,
            })
        };
        check(header(CMD_READ, 0, 0, 4096), LIMITS, read(0, 4096));
        check(
            header(CMD_READ, 0, (1 << 20) - 512, 512),
            LIMITS,
            read((1 << 20) - 512, 512),
        );
        check(header(CMD_READ, 0, 1 << 20, 512), LIMITS, Err(Some(Inval)));
        check(header(CMD_WRITE, 0, 1 << 20, 512), LIMITS, Err(Some(NoSpc)));
        check(
            header(CMD_WRITE_ZEROES, 0, u64::MAX - 100, 512),
            LIMITS,
            Err(Some(Inval)),
        );
        check(header(CMD_READ, 0, 100, 512), LIMITS, Err(Some(Inval)));
        check(header(CMD_READ, 0, 0, 100), LIMITS, Err(Some(Inval)));
        // FUA is accepted on every command (older qemu sets it on FLUSH).
        check(
            header(CMD_READ, CMD_FLAG_FUA, 0, 512),
            LIMITS,
            Ok(CheckedRequest::Read {
                offset_bytes: 0,
                len_bytes: 512,
            }),
        );
        check(
            header(CMD_FLUSH, CMD_FLAG_FUA, 0, 0),
            LIMITS,
            Ok(CheckedRequest::Flush),
        );
        check(
            header(CMD_DISC, CMD_FLAG_FUA, 0, 0),
            LIMITS,
            Ok(CheckedRequest::Disconnect),
        );
        // Any other flag on a read is still refused.
        check(header(CMD_READ, 1 << 1, 0, 512), LIMITS, Err(Some(Inval)));
        check(header(9, 0, 0, 512), LIMITS, Err(Some(Inval)));
        check(
            header(CMD_READ, 0, 0, PAYLOAD_BYTES_MAX + 512),
            LIMITS,
            Err(Some(Inval)),
        );
        // With structured replies, an over-large read is EOVERFLOW (proto.md: "reject large
        // read requests up front with NBD_EOVERFLOW"), however far it reaches.
        for len in [PAYLOAD_BYTES_MAX + 512, 64 << 20, u32::MAX - 511] {
            check_replying(
                header(CMD_READ, 0, 0, len),
                LIMITS,
                true,
                Err(Some(Overflow)),
            );
        }
        check_replying(header(CMD_READ, 0, 0, 4096), LIMITS, true, read(0, 4096));
        check(
            header(CMD_WRITE, 0, 0, PAYLOAD_BYTES_MAX + 512),
            LIMITS,
            Err(None),
        );
        check(
            header(CMD_WRITE, CMD_FLAG_FUA, 512, 512),
            LIMITS,
            Ok(CheckedRequest::Write {
                offset_bytes: 512,
                len_bytes: 512,
                fua: true,
            }),
        );
        check(
            header(CMD_FLUSH, 0, 0, 0),
            LIMITS,
            Ok(CheckedRequest::Flush),
        );
        check(
            header(CMD_DISC, 0, 0, 0),
            LIMITS,
            Ok(CheckedRequest::Disconnect),
        );
        let read_only = ExportLimits {
            read_only: true,
            ..LIMITS
        };
        check(header(CMD_WRITE, 0, 0, 512), read_only, Err(Some(Perm)));
        check(header(CMD_TRIM, 0, 0, 512), read_only, Err(Some(Perm)));
        check(header(CMD_READ, 0, 0, 512), read_only, read(0, 512));
        let mut bad = header(CMD_READ, 0, 0, 512);
        bad.magic = 0x1234_5678;
        check(bad, LIMITS, Err(None));
    }

    #[test]
    fn info_requests_parse_or_say_why_not() {
        let mut data = Vec::new();
        data.extend_from_slice(&3u32.to_be_bytes());
        data.extend_from_slice(b"abc");
        data.extend_from_slice(&2u16.to_be_bytes());
        data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        data.extend_from_slice(&INFO_NAME.to_be_bytes());
        assert_eq!(
            parse_info_request(&data),
            Ok(InfoRequest {
                name: "abc".into(),
                requests: vec![INFO_BLOCK_SIZE, INFO_NAME],
            })
        );
        assert!(parse_info_request(&data[..data.len() - 1]).is_err());
        assert!(parse_info_request(&data[..5]).is_err());
        assert!(parse_info_request(&[]).is_err());
        assert!(parse_info_request(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn error_messages_are_cut_on_a_character_boundary() {
        let s = "é".repeat(3000);
        let t = truncate_utf8(&s, STRING_BYTES_MAX);
        assert!(t.len() <= STRING_BYTES_MAX);
        assert_eq!(t.len() % 2, 0);
    }

    proptest! {
        /// Any header: the check answers without panicking, and whatever it accepts lies
        /// inside the export, aligned, within the payload limit, and writes nothing on a
        /// read-only export.
        #[test]
        fn accepted_requests_are_inside_the_export(
            bytes in proptest::array::uniform28(any::<u8>()),
            magic_ok in any::<bool>(),
            read_only in any::<bool>(),
            structured in any::<bool>(),
        ) {
            let mut h = RequestHeader::decode(&bytes);
            if magic_ok {
                h.magic = REQUEST_MAGIC;
            }
            prop_assert_eq!(RequestHeader::decode(&h.encode()), h);
            let limits = ExportLimits { read_only, ..LIMITS };
            match check_request(&h, &limits, structured) {
                Ok(CheckedRequest::Read { offset_bytes, len_bytes })
                | Ok(CheckedRequest::Write { offset_bytes, len_bytes, .. })
                | Ok(CheckedRequest::WriteZeroes { offset_bytes, len_bytes, .. })
                | Ok(CheckedRequest::Trim { offset_bytes, len_bytes, .. }) => {
                    prop_assert!(offset_bytes + u64::from(len_bytes) <= limits.size_bytes);
                    prop_assert_eq!(offset_bytes % 512, 0);
                    prop_assert_eq!(len_bytes % 512, 0);
                    prop_assert!(len_bytes <= PAYLOAD_BYTES_MAX);
                    prop_assert!(h.kind == CMD_READ || !read_only);
                }
                Ok(CheckedRequest::Flush) => prop_assert_eq!(h.kind, CMD_FLUSH),
                Ok(CheckedRequest::Disconnect) => prop_assert_eq!(h.kind, CMD_DISC),
                Err(RequestError::Fatal(_)) => {
                    prop_assert!(h.magic != REQUEST_MAGIC || h.payload_bytes() > PAYLOAD_BYTES_MAX)
                }
                Err(RequestError::Refused { .. }) => prop_assert_eq!(h.magic, REQUEST_MAGIC),
            }
        }

        #[test]
        fn info_request_parsing_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_info_request(&data);
        }
    }
}
