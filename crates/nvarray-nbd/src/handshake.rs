//! The handshake: fixed newstyle negotiation, from the greeting to the transmission phase.
//!
//! Options served: `EXPORT_NAME`, `INFO`, `GO`, `LIST`, `ABORT`, `STRUCTURED_REPLY`; every
//! other option gets `NBD_REP_ERR_UNSUP` with a message. The server has one export; its name
//! and the empty (default) name both reach it. Block sizes are always sent with `INFO`/`GO`;
//! a client that never asked for them and sends unaligned requests gets `EINVAL` for those
//! requests (the spec's clean error), never a read-modify-write race.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use crate::io::Stream;
use crate::proto::*;

/// What the server exports.
#[derive(Clone, Debug)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub limits: ExportLimits,
    /// Preferred block size advertised (a power of two ≥ the minimum and ≥ 512).
    pub preferred_block_bytes: u32,
}

impl Export {
    /// Transmission flags: flush, FUA, trim and write-zeroes are served; several connections
    /// may share the export (a flush on any of them covers writes completed on all: the device
    /// flushes the whole backing). A read-only export advertises none of the commands that
    /// change data (trim, write-zeroes) nor FUA, which only means something for them: a
    /// client would otherwise offer them (`nbdinfo` said `can_trim: true`) and get EPERM.
    pub fn transmission_flags(&self) -> u16 {
        let flags = TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH | TFLAG_CAN_MULTI_CONN;
        if self.limits.read_only {
            flags | TFLAG_READ_ONLY
        } else {
            flags | TFLAG_SEND_FUA | TFLAG_SEND_TRIM | TFLAG_SEND_WRITE_ZEROES
        }
    }

    fn matches(&self, name: &str) -> bool {
        name.is_empty() || name == self.name
    }
}

/// How the handshake ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The client chose the export: go on to transmission.
    Transmission { structured: bool },
    /// The client aborted, or was refused, or broke the protocol: close the connection.
    Closed,
}

/// A handshake during which the client sends nothing for this long is closed. Real clients
/// answer in well under a millisecond; a silent connection (a port scanner, a client that
/// hangs) must not hold a handshake slot for long.
pub const HANDSHAKE_IDLE: Duration = Duration::from_secs(3);

fn read_array<const N: usize>(s: &mut Stream, deadline: Instant) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    read_before(s, &mut b, deadline)?;
    Ok(b)
}

/// Fills `buf` before `deadline`, with no silence longer than `HANDSHAKE_IDLE`. The whole
/// handshake has one deadline, so a client that drips a byte now and then cannot hold its
/// handshake slot for ever either.
fn read_before(s: &mut Stream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client did not finish the handshake in time",
            ));
        }
        s.set_read_timeout(Some(left.min(HANDSHAKE_IDLE)))?;
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && left > HANDSHAKE_IDLE => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "client sent nothing for {} s during the handshake",
                        HANDSHAKE_IDLE.as_secs()
                    ),
                ));
            }
            // The socket's timeout ran out: the deadline check above reports it.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn reply(s: &mut Stream, option: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    let mut out = Vec::with_capacity(20 + data.len());
    put_option_reply(&mut out, option, kind, data);
    s.write_all(&out)
}

fn error_reply(s: &mut Stream, option: u32, kind: u32, message: &str) -> io::Result<()> {
    reply(
        s,
        option,
        kind,
        truncate_utf8(message, STRING_BYTES_MAX).as_bytes(),
    )
}

/// Runs the handshake on a blocking stream. With `refuse`, every option is answered with
/// `NBD_REP_ERR_SHUTDOWN` (or another error) carrying that message until the client gives up:
/// how a client arriving during shutdown learns why. `admit` is asked when the client chooses
/// the export (`GO` or `EXPORT_NAME`), and takes its serving slot: a refusal's message goes
/// back as `NBD_REP_ERR_POLICY` to `GO` (the client reports it) and closes the connection on
/// `EXPORT_NAME` (which has no error reply). A client that has not finished by `deadline`, or
/// is silent for `HANDSHAKE_IDLE`, is dropped (`TimedOut`); the caller sets a write timeout
/// too, so one that stops taking replies is dropped as well.
pub fn negotiate(
    s: &mut Stream,
    export: &Export,
    refuse: Option<(u32, &str)>,
    admit: &mut dyn FnMut() -> Result<(), String>,
    deadline: Instant,
    log: &mut dyn FnMut(&str),
) -> io::Result<Outcome> {
    let Some(no_zeroes) = greet(s, deadline, log)? else {
        return Ok(Outcome::Closed);
    };
    let mut structured = false;
    for _ in 0..OPTIONS_MAX {
        let Some((option, data)) = read_option(s, deadline, log)? else {
            return Ok(Outcome::Closed);
        };
        if let Some((kind, message)) = refuse {
            if answer_refused(s, option, kind, message)? {
                return Ok(Outcome::Closed);
            }
            continue;
        }
        match option {
            OPT_EXPORT_NAME => {
                if answer_export_name(s, export, &data, no_zeroes, admit, log)? {
                    return Ok(Outcome::Transmission { structured });
                }
                return Ok(Outcome::Closed);
            }
            OPT_INFO | OPT_GO => {
                if answer_info_or_go(s, option, export, &data, admit)? {
                    return Ok(Outcome::Transmission { structured });
                }
            }
            OPT_LIST => answer_list(s, option, export, &data)?,
            OPT_ABORT => {
                // The client may already have gone; the acknowledgement is a courtesy.
                let _ = reply(s, option, REP_ACK, &[]);
                return Ok(Outcome::Closed);
            }
            OPT_STRUCTURED_REPLY => {
                if answer_structured_reply(s, option, &data)? {
                    structured = true;
                }
            }
            OPT_STARTTLS => error_reply(
                s,
                option,
                REP_ERR_UNSUP,
                "TLS is not supported; use a Unix socket or loopback",
            )?,
            other => error_reply(
                s,
                option,
                REP_ERR_UNSUP,
                &format!("option {other} is not supported by nvarray serve"),
            )?,
        }
    }
    log(&format!("more than {OPTIONS_MAX} options; closing"));
    Ok(Outcome::Closed)
}

/// Sends the server's greeting and reads the client's flags. Returns whether the client
/// asked for no zeroes, or `None` (logged) when its flags include ones this server does not
/// know.
fn greet(s: &mut Stream, deadline: Instant, log: &mut dyn FnMut(&str)) -> io::Result<Option<bool>> {
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBD_MAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&greeting)?;
    let client_flags = u32::from_be_bytes(read_array::<4>(s, deadline)?);
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        log(&format!(
            "client flags {client_flags:#x} include ones this server does not know; closing"
        ));
        return Ok(None);
    }
    Ok(Some(client_flags & FLAG_C_NO_ZEROES != 0))
}

/// Reads one option request: its option and its data. `None` (logged) when the client broke
/// the protocol (a bad magic, or more data than `OPTION_BYTES_MAX`).
fn read_option(
    s: &mut Stream,
    deadline: Instant,
    log: &mut dyn FnMut(&str),
) -> io::Result<Option<(u32, Vec<u8>)>> {
    let header = OptionHeader::decode(&read_array::<OPTION_HEADER_BYTES>(s, deadline)?);
    if header.magic != IHAVEOPT {
        log(&format!("bad option magic {:#x}; closing", header.magic));
        return Ok(None);
    }
    if header.len_bytes > OPTION_BYTES_MAX {
        log(&format!(
            "option {} carries {} bytes (at most {OPTION_BYTES_MAX}); closing",
            header.option, header.len_bytes
        ));
        return Ok(None);
    }
    let mut data = vec![0u8; header.len_bytes as usize];
    read_before(s, &mut data, deadline)?;
    Ok(Some((header.option, data)))
}

/// Answers an option while the server refuses every one (`kind`, `message`). Returns whether
/// the conversation is over.
fn answer_refused(s: &mut Stream, option: u32, kind: u32, message: &str) -> io::Result<bool> {
    // Every option gets the refusal, so the client reports it when it asks for the
    // export; `EXPORT_NAME` has no error reply, and `ABORT` ends the conversation.
    match option {
        OPT_EXPORT_NAME => Ok(true),
        OPT_ABORT => {
            let _ = reply(s, option, REP_ACK, &[]);
            Ok(true)
        }
        _ => {
            error_reply(s, option, kind, message)?;
            Ok(false)
        }
    }
}

/// Answers `EXPORT_NAME`: the export's size and flags when the name matches and `admit`
/// agrees. Returns whether the client has the export; if not, the connection closes.
fn answer_export_name(
    s: &mut Stream,
    export: &Export,
    data: &[u8],
    no_zeroes: bool,
    admit: &mut dyn FnMut() -> Result<(), String>,
    log: &mut dyn FnMut(&str),
) -> io::Result<bool> {
    let name = match parse_string(data, "export name") {
        Ok(name) => name,
        Err(why) => {
            log(&format!("{why}; closing (EXPORT_NAME has no error reply)"));
            return Ok(false);
        }
    };
    if !export.matches(name) {
        // This option has no error reply: the spec's answer is to hang up.
        log(&format!(
            "client asked for unknown export {name:?}; closing"
        ));
        return Ok(false);
    }
    if let Err(message) = admit() {
        log(&format!(
            "{message}; closing (EXPORT_NAME has no error reply)"
        ));
        return Ok(false);
    }
    let mut out = Vec::with_capacity(10 + 124);
    out.extend_from_slice(&export.limits.size_bytes.to_be_bytes());
    out.extend_from_slice(&export.transmission_flags().to_be_bytes());
    if !no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
    s.write_all(&out)?;
    Ok(true)
}

/// Answers `INFO` or `GO` (`option`), or refuses it with an error reply. Returns whether the
/// client chose the export (a `GO` that succeeded).
fn answer_info_or_go(
    s: &mut Stream,
    option: u32,
    export: &Export,
    data: &[u8],
    admit: &mut dyn FnMut() -> Result<(), String>,
) -> io::Result<bool> {
    let request = match parse_info_request(data) {
        Ok(r) => r,
        Err(message) => {
            error_reply(s, option, REP_ERR_INVALID, &message)?;
            return Ok(false);
        }
    };
    if !export.matches(&request.name) {
        let message = format!(
            "no export named {:?}; this server exports {:?} (also the default, \"\")",
            request.name, export.name
        );
        error_reply(s, option, REP_ERR_UNKNOWN, &message)?;
        return Ok(false);
    }
    if option == OPT_GO {
        if let Err(message) = admit() {
            error_reply(s, option, REP_ERR_POLICY, &message)?;
            return Ok(false);
        }
    }
    send_info(s, option, export, &request.requests)?;
    reply(s, option, REP_ACK, &[])?;
    Ok(option == OPT_GO)
}

/// Answers `LIST` with the one export.
fn answer_list(s: &mut Stream, option: u32, export: &Export, data: &[u8]) -> io::Result<()> {
    if !data.is_empty() {
        return error_reply(s, option, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
    }
    let mut entry = Vec::new();
    entry.extend_from_slice(&(export.name.len() as u32).to_be_bytes());
    entry.extend_from_slice(export.name.as_bytes());
    entry.extend_from_slice(export.description.as_bytes());
    reply(s, option, REP_SERVER, &entry)?;
    reply(s, option, REP_ACK, &[])
}

/// Answers `STRUCTURED_REPLY`. Returns whether structured replies are now on.
fn answer_structured_reply(s: &mut Stream, option: u32, data: &[u8]) -> io::Result<bool> {
    if !data.is_empty() {
        error_reply(
            s,
            option,
            REP_ERR_INVALID,
            "NBD_OPT_STRUCTURED_REPLY takes no data",
        )?;
        return Ok(false);
    }
    reply(s, option, REP_ACK, &[])?;
    Ok(true)
}

/// `NBD_REP_INFO` replies: the export (always), its block sizes (always: clients that
/// honour them never send a request the device must refuse), and name or description when
/// asked.
fn send_info(s: &mut Stream, option: u32, export: &Export, requests: &[u16]) -> io::Result<()> {
    let mut info = Vec::with_capacity(12);
    info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    info.extend_from_slice(&export.limits.size_bytes.to_be_bytes());
    info.extend_from_slice(&export.transmission_flags().to_be_bytes());
    reply(s, option, REP_INFO, &info)?;
    // proto.md ("NBD_INFO_BLOCK_SIZE"): minimum <= preferred <= maximum, the first two powers
    // of two; a client may hang up on an export that breaks this.
    debug_assert!(
        export.limits.block_bytes <= export.preferred_block_bytes
            && export.preferred_block_bytes <= PAYLOAD_BYTES_MAX,
        "block sizes advertised: expected minimum <= preferred <= maximum, found {} {} {}",
        export.limits.block_bytes,
        export.preferred_block_bytes,
        PAYLOAD_BYTES_MAX
    );
    debug_assert!(
        export.preferred_block_bytes.is_power_of_two(),
        "preferred block size advertised: expected a power of two, found {}",
        export.preferred_block_bytes
    );
    let mut info = Vec::with_capacity(14);
    info.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    info.extend_from_slice(&export.limits.block_bytes.to_be_bytes());
    info.extend_from_slice(&export.preferred_block_bytes.to_be_bytes());
    info.extend_from_slice(&PAYLOAD_BYTES_MAX.to_be_bytes());
    reply(s, option, REP_INFO, &info)?;
    for &r in requests {
        let text = match r {
            INFO_NAME => &export.name,
            INFO_DESCRIPTION => &export.description,
            _ => continue,
        };
        let mut info = Vec::with_capacity(2 + text.len());
        info.extend_from_slice(&r.to_be_bytes());
        info.extend_from_slice(text.as_bytes());
        reply(s, option, REP_INFO, &info)?;
    }
    Ok(())
}
