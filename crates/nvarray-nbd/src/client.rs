//! A minimal, blocking NBD client: fixed newstyle handshake with `NBD_OPT_GO`, one request at a
//! time, simple or structured replies. It exists so tests can speak the protocol exactly
//! (crash tests that must know which writes were acknowledged, malformed-request tests that
//! must send bytes no real client would); real workloads use fio, qemu or nbdcopy.
//!
//! Its parts serve clients that cannot block too (the simulation's): the handshake is sent
//! whole before any reply is read (`handshake_request`, `read_handshake_replies`), and
//! replies are read one part at a time from any reader (`read_reply_part`), whichever request
//! each answers.

use std::io::{self, Read, Write};

use crate::io::Stream;
use crate::proto::*;

/// The export as the server described it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    pub size_bytes: u64,
    pub transmission_flags: u16,
    pub block_bytes_min: u32,
}

/// A reply to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Ok(Vec<u8>),
    Error { errno: u32, message: String },
}

pub struct Client {
    stream: Stream,
    structured: bool,
    pub info: ExportInfo,
    cookie: u64,
    /// Offset of the request in flight (structured chunks name absolute offsets).
    offset_bytes: u64,
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn read_u16(s: &mut impl Read) -> io::Result<u16> {
    let mut b = [0u8; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

fn read_u32(s: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_u64(s: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

fn put_option(out: &mut Vec<u8>, option: u32, data: &[u8]) {
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Reads one option reply: (reply type, data).
fn read_option_reply(s: &mut impl Read, option: u32) -> io::Result<(u32, Vec<u8>)> {
    let magic = read_u64(s)?;
    let echoed = read_u32(s)?;
    let kind = read_u32(s)?;
    let len = read_u32(s)?;
    if magic != OPT_REPLY_MAGIC || echoed != option || len > OPTION_BYTES_MAX {
        return Err(invalid(format!(
            "bad option reply: magic {magic:#x}, option {echoed}, length {len}"
        )));
    }
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data)?;
    Ok((kind, data))
}

impl Client {
    /// Whether the connection has structured replies.
    pub fn structured(&self) -> bool {
        self.structured
    }

    /// Connects to the export `name`, asking for structured replies when `structured`.
    pub fn connect(mut stream: Stream, name: &str, structured: bool) -> io::Result<Client> {
        stream.write_all(&handshake_request(name, structured))?;
        let info = read_handshake_replies(&mut stream, structured)?;
        Ok(Client {
            stream,
            structured,
            info,
            cookie: 0,
            offset_bytes: 0,
        })
    }

    /// Ends the connection as a client should: `NBD_CMD_DISC`, then waits for the server to
    /// close it. The server gives the connection's serving slot back before its socket
    /// closes, so once this returns a new connection finds the slot free.
    pub fn disconnect(mut self) -> io::Result<()> {
        self.cookie += 1;
        let header = RequestHeader {
            magic: REQUEST_MAGIC,
            flags: 0,
            kind: CMD_DISC,
            cookie: self.cookie,
            offset_bytes: 0,
            len_bytes: 0,
        };
        self.stream.write_all(&header.encode())?;
        let mut rest = Vec::new();
        self.stream.read_to_end(&mut rest)?;
        if !rest.is_empty() {
            return Err(invalid(format!(
                "{} bytes after a disconnect, where the server should only close",
                rest.len()
            )));
        }
        Ok(())
    }

    /// Sends raw bytes (a malformed request, say).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends one request and waits for its reply.
    pub fn request(
        &mut self,
        kind: u16,
        flags: u16,
        offset_bytes: u64,
        len_bytes: u32,
        payload: &[u8],
    ) -> io::Result<Reply> {
        self.cookie += 1;
        self.offset_bytes = offset_bytes;
        let header = RequestHeader {
            magic: REQUEST_MAGIC,
            flags,
            kind,
            cookie: self.cookie,
            offset_bytes,
            len_bytes,
        };
        let mut out = header.encode().to_vec();
        out.extend_from_slice(payload);
        self.stream.write_all(&out)?;
        self.read_reply(kind == CMD_READ, len_bytes)
    }

    pub fn read(&mut self, offset_bytes: u64, len_bytes: u32) -> io::Result<Reply> {
        self.request(CMD_READ, 0, offset_bytes, len_bytes, &[])
    }

    pub fn write(&mut self, offset_bytes: u64, data: &[u8], fua: bool) -> io::Result<Reply> {
        let flags = if fua { CMD_FLAG_FUA } else { 0 };
        self.request(CMD_WRITE, flags, offset_bytes, data.len() as u32, data)
    }

    pub fn flush(&mut self) -> io::Result<Reply> {
        self.request(CMD_FLUSH, 0, 0, 0, &[])
    }

    /// Reads the next simple reply to a read of `len_bytes`, whichever request it answers
    /// (for clients that pipeline with `send_raw`): its cookie, error and data.
    pub fn read_pipelined_reply(&mut self, len_bytes: u32) -> io::Result<(u64, u32, Vec<u8>)> {
        let part = read_reply_part(&mut self.stream, false, |_| Some(len_bytes))?;
        Ok(match part.kind {
            Part::Ok(data) => (part.cookie, 0, data),
            Part::Error { errno, .. } => (part.cookie, errno, Vec::new()),
            _ => unreachable!("simple replies only"),
        })
    }

    /// Reads the reply to the last request (`len_bytes` of data for a read).
    fn read_reply(&mut self, is_read: bool, len_bytes: u32) -> io::Result<Reply> {
        let cookie = self.cookie;
        let read_len = if is_read { len_bytes } else { 0 };
        let mut data = vec![0u8; read_len as usize];
        loop {
            let part = read_reply_part(&mut self.stream, self.structured, |c| {
                (c == cookie).then_some(read_len)
            })?;
            match part.kind {
                Part::Ok(bytes) => data = bytes,
                Part::None => {}
                Part::Data {
                    offset_bytes,
                    bytes,
                } => {
                    let start = offset_bytes
                        .checked_sub(self.offset_bytes)
                        .and_then(|d| usize::try_from(d).ok())
                        .filter(|&start| start + bytes.len() <= data.len())
                        .ok_or_else(|| {
                            invalid(format!("chunk at {offset_bytes} outside the read"))
                        })?;
                    data[start..start + bytes.len()].copy_from_slice(&bytes);
                }
                Part::Error { errno, message } => return Ok(Reply::Error { errno, message }),
            }
            if part.done {
                return Ok(Reply::Ok(data));
            }
        }
    }
}

/// A client's whole handshake, to be sent before reading any reply: its flags, then
/// `NBD_OPT_STRUCTURED_REPLY` when `structured`, then `NBD_OPT_GO` for the export `name`
/// asking for block sizes.
pub fn handshake_request(name: &str, structured: bool) -> Vec<u8> {
    let mut out = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    if structured {
        put_option(&mut out, OPT_STRUCTURED_REPLY, &[]);
    }
    let mut data = Vec::new();
    data.extend_from_slice(&(name.len() as u32).to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    put_option(&mut out, OPT_GO, &data);
    out
}

/// Reads the server's side of the handshake `handshake_request` made: its greeting, then the
/// replies to the options; returns the export's description.
pub fn read_handshake_replies(s: &mut impl Read, structured: bool) -> io::Result<ExportInfo> {
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting)?;
    if greeting[..8] != NBD_MAGIC.to_be_bytes() || greeting[8..16] != IHAVEOPT.to_be_bytes() {
        return Err(invalid("not an NBD newstyle server".into()));
    }
    if structured {
        let (kind, _) = read_option_reply(s, OPT_STRUCTURED_REPLY)?;
        if kind != REP_ACK {
            return Err(invalid(format!("structured replies refused: {kind:#x}")));
        }
    }
    let mut info = ExportInfo {
        size_bytes: 0,
        transmission_flags: 0,
        block_bytes_min: 1,
    };
    loop {
        let (kind, data) = read_option_reply(s, OPT_GO)?;
        match kind {
            REP_ACK => return Ok(info),
            REP_INFO if data.len() >= 2 => {
                let what = u16::from_be_bytes([data[0], data[1]]);
                if what == INFO_EXPORT && data.len() == 12 {
                    info.size_bytes = u64::from_be_bytes(data[2..10].try_into().unwrap());
                    info.transmission_flags = u16::from_be_bytes([data[10], data[11]]);
                } else if what == INFO_BLOCK_SIZE && data.len() == 14 {
                    info.block_bytes_min = u32::from_be_bytes(data[2..6].try_into().unwrap());
                }
            }
            other => {
                return Err(invalid(format!(
                    "NBD_OPT_GO failed ({other:#x}): {}",
                    String::from_utf8_lossy(&data)
                )))
            }
        }
    }
}

/// One part of the server's replies: a simple reply, or one structured chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyPart {
    pub cookie: u64,
    /// The last part of the reply to `cookie`.
    pub done: bool,
    pub kind: Part,
}

/// What a reply part says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// A simple reply's success, with a read's data.
    Ok(Vec<u8>),
    /// A structured reply's data of a read, at `offset_bytes` of the device.
    Data { offset_bytes: u64, bytes: Vec<u8> },
    /// A structured reply's end with nothing more (`NBD_REPLY_TYPE_NONE`).
    None,
    /// An error (always the reply's last part).
    Error { errno: u32, message: String },
}

/// Reads one reply part from `s`, whichever request it answers. `read_len(cookie)` gives the
/// data a simple success reply to `cookie` carries (a read's length, 0 for other commands),
/// or `None` when no request with that cookie is in flight (an error). A reader that ends in
/// the middle of a part gives `UnexpectedEof`: a client that reads from a buffer tries again
/// once more has come.
pub fn read_reply_part(
    s: &mut impl Read,
    structured: bool,
    read_len: impl FnOnce(u64) -> Option<u32>,
) -> io::Result<ReplyPart> {
    let magic = read_u32(s)?;
    if magic == SIMPLE_REPLY_MAGIC {
        let error = read_u32(s)?;
        let cookie = read_u64(s)?;
        let len = read_len(cookie)
            .ok_or_else(|| invalid(format!("simple reply to cookie {cookie}, never sent")))?;
        let kind = if error != 0 {
            Part::Error {
                errno: error,
                message: String::new(),
            }
        } else {
            let mut data = vec![0u8; len as usize];
            s.read_exact(&mut data)?;
            Part::Ok(data)
        };
        return Ok(ReplyPart {
            cookie,
            done: true,
            kind,
        });
    }
    if magic != STRUCTURED_REPLY_MAGIC || !structured {
        return Err(invalid(format!("bad reply magic {magic:#x}")));
    }
    let flags = read_u16(s)?;
    let kind = read_u16(s)?;
    let cookie = read_u64(s)?;
    let len = read_u32(s)?;
    if read_len(cookie).is_none() || len > PAYLOAD_BYTES_MAX + 8 {
        return Err(invalid(format!("bad chunk: cookie {cookie}, length {len}")));
    }
    let mut payload = vec![0u8; len as usize];
    s.read_exact(&mut payload)?;
    let done = flags & REPLY_FLAG_DONE != 0;
    let kind = match kind {
        REPLY_TYPE_OFFSET_DATA if len >= 8 => Part::Data {
            offset_bytes: u64::from_be_bytes(payload[..8].try_into().unwrap()),
            bytes: payload[8..].to_vec(),
        },
        REPLY_TYPE_NONE => Part::None,
        REPLY_TYPE_ERROR if len >= 6 => {
            let errno = u32::from_be_bytes(payload[..4].try_into().unwrap());
            let n = u16::from_be_bytes([payload[4], payload[5]]) as usize;
            let message =
                String::from_utf8_lossy(payload.get(6..6 + n).unwrap_or(&[])).into_owned();
            if !done {
                return Err(invalid("error chunk not final".into()));
            }
            Part::Error { errno, message }
        }
        other => return Err(invalid(format!("unexpected chunk type {other}"))),
    };
    Ok(ReplyPart { cookie, done, kind })
}
