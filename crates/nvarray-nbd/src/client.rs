//! A minimal, blocking NBD client: fixed newstyle handshake with `NBD_OPT_GO`, one request at a
//! time, simple or structured replies. It exists so tests can speak the protocol exactly
//! (crash tests that must know which writes were acknowledged, malformed-request tests that
//! must send bytes no real client would); real workloads use fio, qemu or nbdcopy.

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

fn read_u16(s: &mut Stream) -> io::Result<u16> {
    let mut b = [0u8; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

fn read_u32(s: &mut Stream) -> io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_u64(s: &mut Stream) -> io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

fn send_option(s: &mut Stream, option: u32, data: &[u8]) -> io::Result<()> {
    let mut out = Vec::with_capacity(16 + data.len());
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    s.write_all(&out)
}

/// Reads one option reply: (reply type, data).
fn read_option_reply(s: &mut Stream, option: u32) -> io::Result<(u32, Vec<u8>)> {
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
        let mut greeting = [0u8; 18];
        stream.read_exact(&mut greeting)?;
        if greeting[..8] != NBD_MAGIC.to_be_bytes() || greeting[8..16] != IHAVEOPT.to_be_bytes() {
            return Err(invalid("not an NBD newstyle server".into()));
        }
        stream.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())?;
        if structured {
            send_option(&mut stream, OPT_STRUCTURED_REPLY, &[])?;
            let (kind, _) = read_option_reply(&mut stream, OPT_STRUCTURED_REPLY)?;
            if kind != REP_ACK {
                return Err(invalid(format!("structured replies refused: {kind:#x}")));
            }
        }
        let mut data = Vec::new();
        data.extend_from_slice(&(name.len() as u32).to_be_bytes());
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&1u16.to_be_bytes());
        data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        send_option(&mut stream, OPT_GO, &data)?;
        let mut info = ExportInfo {
            size_bytes: 0,
            transmission_flags: 0,
            block_bytes_min: 1,
        };
        loop {
            let (kind, data) = read_option_reply(&mut stream, OPT_GO)?;
            match kind {
                REP_ACK => break,
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
        Ok(Client {
            stream,
            structured,
            info,
            cookie: 0,
            offset_bytes: 0,
        })
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
        let s = &mut self.stream;
        let magic = read_u32(s)?;
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(invalid(format!("bad reply magic {magic:#x}")));
        }
        let error = read_u32(s)?;
        let cookie = read_u64(s)?;
        let mut data = vec![0u8; if error == 0 { len_bytes as usize } else { 0 }];
        s.read_exact(&mut data)?;
        Ok((cookie, error, data))
    }

    /// Reads the reply to the last request (`len_bytes` of data for a read).
    fn read_reply(&mut self, is_read: bool, len_bytes: u32) -> io::Result<Reply> {
        let s = &mut self.stream;
        let magic = read_u32(s)?;
        if magic == SIMPLE_REPLY_MAGIC {
            let error = read_u32(s)?;
            let cookie = read_u64(s)?;
            if cookie != self.cookie {
                return Err(invalid(format!(
                    "reply to cookie {cookie}, expected {}",
                    self.cookie
                )));
            }
            if error != 0 {
                return Ok(Reply::Error {
                    errno: error,
                    message: String::new(),
                });
            }
            let mut data = vec![0u8; if is_read { len_bytes as usize } else { 0 }];
            s.read_exact(&mut data)?;
            return Ok(Reply::Ok(data));
        }
        if magic != STRUCTURED_REPLY_MAGIC || !self.structured {
            return Err(invalid(format!("bad reply magic {magic:#x}")));
        }
        // Structured: chunks until the one flagged done.
        let mut data = vec![0u8; if is_read { len_bytes as usize } else { 0 }];
        let mut magic = magic;
        loop {
            if magic != STRUCTURED_REPLY_MAGIC {
                return Err(invalid(format!("bad chunk magic {magic:#x}")));
            }
            let flags = read_u16(s)?;
            let kind = read_u16(s)?;
            let cookie = read_u64(s)?;
            let len = read_u32(s)?;
            if cookie != self.cookie || len > PAYLOAD_BYTES_MAX + 8 {
                return Err(invalid(format!("bad chunk: cookie {cookie}, length {len}")));
            }
            let mut payload = vec![0u8; len as usize];
            s.read_exact(&mut payload)?;
            match kind {
                REPLY_TYPE_OFFSET_DATA if len >= 8 => {
                    let at = u64::from_be_bytes(payload[..8].try_into().unwrap());
                    let start = at
                        .checked_sub(self.offset_bytes)
                        .and_then(|d| usize::try_from(d).ok())
                        .ok_or_else(|| invalid(format!("chunk at {at} before the read")))?;
                    let end = start + payload.len() - 8;
                    if end > data.len() {
                        return Err(invalid(format!("chunk at {at} overruns the read")));
                    }
                    data[start..end].copy_from_slice(&payload[8..]);
                }
                REPLY_TYPE_NONE => {}
                REPLY_TYPE_ERROR if len >= 6 => {
                    let errno = u32::from_be_bytes(payload[..4].try_into().unwrap());
                    let n = u16::from_be_bytes([payload[4], payload[5]]) as usize;
                    let message =
                        String::from_utf8_lossy(payload.get(6..6 + n).unwrap_or(&[])).into_owned();
                    if flags & REPLY_FLAG_DONE == 0 {
                        return Err(invalid("error chunk not final".into()));
                    }
                    return Ok(Reply::Error { errno, message });
                }
                other => return Err(invalid(format!("unexpected chunk type {other}"))),
            }
            if flags & REPLY_FLAG_DONE != 0 {
                return Ok(Reply::Ok(data));
            }
            magic = read_u32(s)?;
        }
    }
}
