//! The transmission phase of one connection: requests in, device commands out, replies back.
//!
//! Requests are pipelined: everything the socket holds is read and issued to the device before
//! the connection waits, so a client at queue depth 16 keeps up to 16 requests in the device at
//! once (one queue pair per connection, the device's own tags). A request larger than the
//! device's largest command becomes several commands. Replies go out in completion order, as
//! the protocol allows.
//!
//! System calls are most of what a small request costs the server, so the loop makes few and
//! makes each one count (issue 17): one `recv` takes every request the socket holds; while
//! commands are in flight the connection looks at its socket and sends the replies it has
//! ready once per `TICK` (not after every completion), and once its last command completes it
//! sends every reply in one `send` and waits for the next request inside `recv` itself. When
//! the client is behind (its unread replies pile up, as fio's do at queue depth 16), the
//! connection waits a little before that `recv`, as long as the client's backlog keeps it
//! busy (`pace`), so the requests it sends meanwhile are served as one burst. Per request it
//! takes no lock and reads the clock only once per pass: the active-time clocks are told when
//! the connection's session begins and ends, and statistics are recorded in batches.
//!
//! Every request is checked by `proto::check_request` before anything touches the device.
//! Write payloads are read from the socket straight into the command's DMA buffer.
//!
//! The loop is made of turns (`turn`): each does what can be done now and returns, and only
//! `serve` (a connection's thread) waits between them. A request whose next command finds no
//! free tag, with none of the connection's own commands in flight to give one back, is parked
//! (`Parked`) and resumed by a later turn, instead of the turn waiting for other connections.
//! So the simulation (`simulation`) runs the same connections as the server's threads, one
//! turn at a time, on one thread.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvarray_host::{Device, Done, HostError, Opcode, Prepared, QueuePair};
use nvarray_run::served::Session;

use crate::clock::Clock;
use crate::io::{write_all, write_some, Fill, Input, Stream};
use crate::pace::{Pace, QUICK_RECV_NS};
use crate::proto::*;
use nvarray_host::tag_share::{Seat, TagShare};

/// Requests one connection keeps in flight at most (beyond it, the connection stops reading
/// until replies go out; clients use 16 to 64).
pub const REQUESTS_MAX: usize = 256;

/// Replies are sent once this many bytes wait, even while more completions come.
const OUTPUT_FLUSH_BYTES: usize = 1 << 20;

/// Bytes of reads in flight plus replies not yet sent beyond which a connection stops reading
/// new requests until replies go out. It bounds a connection's memory whatever its client
/// asks: without it, a burst of 32 MiB read requests (28 bytes each on the wire) piled up
/// replies faster than they were sent. Twice the largest request, so one always fits.
const READ_BYTES_BUDGET: u64 = 2 * PAYLOAD_BYTES_MAX as u64;

/// While commands are in flight, how often the connection looks at its socket for new
/// requests and sends the replies it has ready. Each look is a system call or two, which cost
/// more than the device work of a small request, so they are spaced: a reply waits at most
/// this long for the ones completing after it (a `dram` device completes a command in 2-3 µs,
/// so a burst of commands usually completes within one tick and its replies leave in one
/// `send`), and a request arriving meanwhile waits at most this long to be read. With nothing
/// in flight neither waits: the last completion's replies go out at once, and the next request
/// wakes the connection inside `recv`.
const TICK: Duration = Duration::from_micros(5);

/// Where a command's data comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Payload {
    /// None (reads, flushes).
    None,
    /// The request's payload on the socket, read straight into the DMA buffer.
    Socket,
    /// Zeroes (write zeroes).
    Zeroes,
}

/// The device work a checked request becomes.
#[derive(Clone, Copy, Debug)]
struct Work {
    /// The device command (a trim with FUA is a flush).
    kind: Opcode,
    offset_bytes: u64,
    len_bytes: u32,
    /// Send a flush once the data commands are done (FUA).
    fua: bool,
    /// Write zeroes: the data is zeroes, not a payload on the socket.
    zeroes: bool,
}

/// One request in flight.
struct Request {
    cookie: u64,
    /// The device command the request becomes (a trim with FUA is a flush).
    kind: Opcode,
    offset_bytes: u64,
    len_bytes: u32,
    /// Device commands issued and not yet completed.
    commands_left: u32,
    /// Device commands still to issue (a request's commands are issued one by one as tags
    /// allow; completions can arrive before the last is issued).
    unissued: u32,
    /// Send a flush once the data commands are done (FUA); cleared when it is issued.
    fua: bool,
    error: Option<(NbdErrno, String)>,
    /// Simple replies to reads of several commands: the data, assembled in order.
    assembled: Option<Vec<u8>>,
    /// Structured replies: whether the final chunk has gone out with the data.
    done_sent: bool,
    started: Instant,
    /// Bytes of its write payload still on the socket (debug builds): all of it is read, or
    /// skipped, before the request is answered, so the next header is read in step.
    #[cfg(debug_assertions)]
    payload_left: u64,
}

impl Request {
    /// Puts a read command's `data`, read at `offset_bytes`, where the reply takes it: into
    /// the request's assembled data, or into `out` as a structured chunk (`structured`) or
    /// after a simple reply's header.
    #[inline]
    fn put_read_data(
        &mut self,
        data: &[u8],
        offset_bytes: u64,
        out: &mut Vec<u8>,
        structured: bool,
    ) {
        // The data lands inside the request's reply, at its own offset.
        debug_assert!(
            offset_bytes >= self.offset_bytes
                && offset_bytes + data.len() as u64
                    <= self.offset_bytes + u64::from(self.len_bytes),
            "read completion [{}, +{}) outside request {:#x} [{}, +{})",
            offset_bytes,
            data.len(),
            self.cookie,
            self.offset_bytes,
            self.len_bytes
        );
        let at = (offset_bytes - self.offset_bytes) as usize;
        if let Some(assembled) = self.assembled.as_mut() {
            assembled[at..at + data.len()].copy_from_slice(data);
        } else if structured {
            let last = self.commands_left == 0 && self.unissued == 0 && self.error.is_none();
            put_chunk_header(
                out,
                self.cookie,
                if last { REPLY_FLAG_DONE } else { 0 },
                REPLY_TYPE_OFFSET_DATA,
                8 + data.len() as u32,
            );
            out.extend_from_slice(&offset_bytes.to_be_bytes());
            out.extend_from_slice(data);
            self.done_sent = last;
        } else {
            // A simple reply with one command: header, then the data, no copy between.
            // The client reads the request's length of data after the header, and the
            // reply goes out now, so this must be the request's only command.
            debug_assert_eq!(
                (data.len(), self.commands_left, self.unissued),
                (self.len_bytes as usize, 0, 0),
                "simple read reply to {:#x}: expected all {} bytes from its only command, \
                 found {} bytes with {} commands in flight and {} to issue",
                self.cookie,
                self.len_bytes,
                data.len(),
                self.commands_left,
                self.unissued
            );
            put_simple_reply(out, self.cookie, 0);
            out.extend_from_slice(data);
            self.done_sent = true;
        }
    }
}

/// What a connection shares with the rest of its server: its session (its own statistics,
/// read by the report, and the active time of the server and of the connection's client host,
/// which the rates of the whole and of the host's stream are over; see
/// `Transmission::session_begun`), the fair shares of the device's tags, and where its
/// messages go.
pub struct ServerLinks {
    pub session: Session,
    pub tags: Arc<TagShare>,
    pub log: Arc<dyn Fn(&str) + Send + Sync>,
    /// The server's clock (a simulation's, or the wall's).
    pub clock: Clock,
}

/// The rest of a request whose commands wait for a device tag (see the module's notes).
#[derive(Clone, Copy, Debug)]
struct Parked {
    slot: usize,
    work: Work,
    /// Bytes of the request already issued.
    at: u32,
}

/// What one turn of the loop came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Requests were taken or commands completed.
    Progressed,
    /// Nothing could be done now: the device or the client is still to act.
    Idle,
    /// The client has gone (or said goodbye) and nothing is left in flight: call `finish`.
    Closed,
}

/// What the connection learned from the client.
#[derive(Clone, Copy, Debug, Default)]
pub struct Negotiated {
    pub structured: bool,
}

/// One connection's transmission phase.
pub struct Transmission {
    device: Arc<Device>,
    qp: QueuePair,
    stream: Stream,
    input: Input,
    out: Vec<u8>,
    limits: ExportLimits,
    structured: bool,
    requests: Vec<Option<Request>>,
    free_slots: Vec<usize>,
    /// Per device tag: the request slot its command belongs to.
    tag_slot: Vec<usize>,
    /// Requests whose data is done and whose FUA flush is still to issue.
    fua_pending: Vec<usize>,
    commands_in_flight: usize,
    /// The request waiting for a tag, if any: no other is taken meanwhile (its write payload
    /// is next on the socket).
    parked: Option<Parked>,
    /// This connection's standing in the device's tag shares (`tag_share.rs`).
    seat: Seat<Arc<TagShare>>,
    /// Bytes of the read requests in flight (see `READ_BYTES_BUDGET`).
    read_bytes_live: u64,
    finished: Vec<Done>,
    zeroes: Box<[u8]>,
    closing: bool,
    /// Requests answered and not yet recorded in the session's statistics: (read, bytes,
    /// latency ns), recorded together under one lock before their replies are sent
    /// (`record_stats`).
    unrecorded: Vec<(bool, u32, u64)>,
    /// The session's statistics and the active time of the server and of this connection's
    /// client host. A connection is active from its first request to its close (its
    /// session): the client's own time between its requests is part of its rate, as in the
    /// client's own measurement (fio at `rate_iops=5` did 5 IOPS, not the 20,000 that one
    /// request's latency gives), while the time before a client's first request and between
    /// sessions is not (the clocks bridge only gaps under `nvarray_report::ACTIVE_GAP_MAX`).
    session: Session,
    /// Whether the session has begun on both clocks (at the first request).
    session_begun: bool,
    /// The time of this pass of the loop, read once per pass, after a wait for a request and
    /// after each collection of completions: requests are timed from it.
    now: Instant,
    /// When the connection last looked at its socket (see `TICK`).
    tick_at: Instant,
    /// What the connection has answered, for pacing its reads (`pace`).
    pace: Pace,
    /// Whether the last wait for a request found one already there (see
    /// `pace::QUICK_RECV_NS`): only then is the client's backlog looked at.
    client_ahead: bool,
    log: Arc<dyn Fn(&str) + Send + Sync>,
    clock: Clock,
}

impl Transmission {
    pub fn new(
        device: Arc<Device>,
        qp: QueuePair,
        stream: Stream,
        limits: ExportLimits,
        negotiated: Negotiated,
        links: ServerLinks,
    ) -> Transmission {
        let now = links.clock.now();
        Transmission {
            qp,
            stream,
            input: Input::new(),
            out: Vec::with_capacity(OUTPUT_FLUSH_BYTES + 64 * 1024),
            limits,
            structured: negotiated.structured,
            requests: (0..REQUESTS_MAX).map(|_| None).collect(),
            free_slots: (0..REQUESTS_MAX).rev().collect(),
            tag_slot: vec![usize::MAX; device.tags()],
            fua_pending: Vec::with_capacity(REQUESTS_MAX),
            commands_in_flight: 0,
            parked: None,
            seat: Seat::new(links.tags),
            read_bytes_live: 0,
            finished: Vec::with_capacity(device.tags()),
            zeroes: vec![0u8; device.command_bytes_max() as usize].into_boxed_slice(),
            closing: false,
            unrecorded: Vec::with_capacity(REQUESTS_MAX),
            session: links.session,
            session_begun: false,
            now,
            tick_at: now,
            pace: Pace::default(),
            client_ahead: false,
            log: links.log,
            clock: links.clock,
            device,
        }
    }

    /// Serves requests until the client disconnects (or shutdown closes the socket's reading
    /// side), then finishes what is in flight and sends the last replies. Returns the queue
    /// pair, idle, for the next connection, and the session, to be closed.
    pub fn run(mut self) -> (QueuePair, Session, io::Result<()>) {
        let result = self.serve();
        self.finish(result)
    }

    /// Ends the connection after `serve` or the last `turn` (which came to `result`): collects
    /// whatever is still in flight, sends the last replies if the connection is sound, and
    /// ends the session on the clocks. Returns the queue pair, idle, and the session.
    pub fn finish(mut self, result: io::Result<()>) -> (QueuePair, Session, io::Result<()>) {
        // Whatever happened, nothing may stay in flight on a queue pair handed on.
        while self.commands_in_flight > 0 {
            self.reap(true);
        }
        let result = result.and_then(|()| self.send_all_replies());
        if self.session_begun {
            self.session.end();
        }
        (self.qp, self.session, result)
    }

    fn serve(&mut self) -> io::Result<()> {
        // Blocking mode: each call says whether it may wait (see `io`).
        self.stream.set_nonblocking(false)?;
        // Naps (`wait_a_little`) and waits (`pace`) of tens of microseconds must not overshoot
        // by Linux's default 50 µs of timer slack.
        nvarray_host::fine_timer_slack();
        self.tick_at = self.clock.now();
        loop {
            match self.turn()? {
                Turn::Closed => return Ok(()),
                Turn::Progressed => {}
                // Parked with nothing of its own in flight: only other connections can give
                // a tag back.
                Turn::Idle if self.commands_in_flight == 0 => std::thread::yield_now(),
                Turn::Idle => self.wait_a_little(),
            }
        }
    }

    /// Nothing in flight, nothing parked, no FUA flush to issue.
    fn idle(&self) -> bool {
        self.commands_in_flight == 0 && self.fua_pending.is_empty() && self.parked.is_none()
    }

    /// One turn of the loop: issues what waited for a tag, sends the replies that are ready,
    /// takes the requests the socket holds (waiting for one inside `recv` when the connection
    /// is idle, on a socket), and collects completions. In memory no step waits.
    pub fn turn(&mut self) -> io::Result<Turn> {
        self.issue_fua_flushes();
        if let Some(Parked { slot, work, at }) = self.parked.take() {
            self.issue_commands(slot, work, at)?;
        }
        self.now = self.clock.now();
        let idle = self.idle();
        if self.closing && idle {
            return Ok(Turn::Closed);
        }
        let mut progressed = false;
        if idle || self.now.duration_since(self.tick_at) >= TICK {
            if idle {
                // The last command is done: every reply goes out now, before any wait.
                // What the client has not read of the earlier ones is its backlog.
                let unread = if self.client_ahead {
                    self.stream.unread_by_peer()
                } else {
                    None
                };
                self.send_all_replies()?;
                if let Some(hold) = unread.and_then(|bytes| self.pace.hold(bytes)) {
                    // Nothing is in flight, so no completion can be late.
                    std::thread::sleep(hold);
                }
            } else if !self.out.is_empty() {
                self.send_replies()?;
            }
            progressed = self.take_requests(idle)?;
            // From the end of a wait for requests, if there was one.
            self.tick_at = self.now;
        }
        if self.reap(false) > 0 {
            progressed = true;
        }
        if self.out.len() >= OUTPUT_FLUSH_BYTES {
            self.send_replies()?;
        }
        Ok(if progressed {
            Turn::Progressed
        } else {
            Turn::Idle
        })
    }

    /// Whether the connection may take another request (see `READ_BYTES_BUDGET`).
    fn within_budget(&self) -> bool {
        self.out.len() as u64 + self.read_bytes_live < READ_BYTES_BUDGET
    }

    /// Starts every request buffered, reading the socket once for more (and, when `idle`,
    /// waiting there until a whole request header has come), as long as the connection has
    /// a free slot and is within its budget. End of input sets `closing`. Returns whether it
    /// started any request.
    fn take_requests(&mut self, idle: bool) -> io::Result<bool> {
        let mut started = false;
        let mut read = false;
        while !self.closing
            && self.parked.is_none()
            && !self.free_slots.is_empty()
            && self.within_budget()
        {
            if self.input.buffered().len() >= REQUEST_HEADER_BYTES {
                let bytes: [u8; REQUEST_HEADER_BYTES] = self.input.buffered()
                    [..REQUEST_HEADER_BYTES]
                    .try_into()
                    .expect("28 bytes");
                self.input.consume(REQUEST_HEADER_BYTES);
                self.start(RequestHeader::decode(&bytes))?;
                started = true;
                continue;
            }
            // Wait only while the connection has nothing else to do; one look otherwise, since
            // a `recv` that returned takes everything the socket held.
            let wait = idle && !started && self.commands_in_flight == 0;
            if read && !wait {
                break;
            }
            read = true;
            let asked = wait.then(|| self.clock.now());
            match self.input.fill(&self.stream, wait)? {
                Fill::Data(0) => break,
                Fill::Data(_) => {
                    if let Some(asked) = asked {
                        // It waited: requests are timed from their arrival.
                        self.now = self.clock.now();
                        self.client_ahead =
                            self.now.duration_since(asked).as_nanos() < u128::from(QUICK_RECV_NS);
                    }
                }
                Fill::Eof => self.closing = true,
                Fill::Empty => {
                    if wait {
                        // A read timeout (none is set in this phase); wait in poll instead.
                        // In memory nothing comes while the server waits: the turn ends.
                        if !self.stream.wait_ready(libc::POLLIN, None)? {
                            break;
                        }
                        read = false;
                    }
                }
            }
        }
        Ok(started)
    }

    /// Checks a request and starts it: issues its commands, or answers it at once.
    fn start(&mut self, header: RequestHeader) -> io::Result<()> {
        let started = self.now;
        self.begin_session(started);
        let Some(command) = self.check_or_refuse(&header)? else {
            return Ok(());
        };
        let Some(work) = self.device_work(command) else {
            return Ok(());
        };
        let step = self.device.command_bytes_max();
        let commands = if work.kind == Opcode::Flush {
            1
        } else {
            work.len_bytes.div_ceil(step)
        };
        if commands == 0 {
            self.answer_zero_length(header.cookie, work.kind);
            return Ok(());
        }
        let slot = self.open_request(header.cookie, work, commands, started);
        self.issue_commands(slot, work, 0)
    }

    /// Begins the session on both clocks at its first request (see `busy`).
    fn begin_session(&mut self, started: Instant) {
        if !self.session_begun {
            // The session's first request (see `busy`).
            self.session_begun = true;
            self.session.begin_at(started);
        }
    }

    /// Checks a request against the export. A fatal error closes the connection (`Err`); a
    /// refused request is answered at once and gives `None`.
    fn check_or_refuse(&mut self, header: &RequestHeader) -> io::Result<Option<CheckedRequest>> {
        match check_request(header, &self.limits, self.structured) {
            Ok(c) => Ok(Some(c)),
            Err(RequestError::Fatal(message)) => {
                (self.log)(&message);
                self.closing = true;
                Err(io::Error::new(io::ErrorKind::InvalidData, message))
            }
            Err(RequestError::Refused { errno, message }) => {
                // A refused write's payload is still on the wire: drop it to stay in step.
                self.input
                    .skip(&self.stream, header.payload_bytes() as usize)?;
                self.reply_error(header.cookie, header.kind == CMD_READ, errno, &message);
                Ok(None)
            }
        }
    }

    /// The device work a checked request becomes; `None` for a disconnect, which starts
    /// closing.
    fn device_work(&mut self, command: CheckedRequest) -> Option<Work> {
        let zeroes = matches!(command, CheckedRequest::WriteZeroes { .. });
        let (kind, offset_bytes, len_bytes, fua) = match command {
            CheckedRequest::Disconnect => {
                self.closing = true;
                return None;
            }
            // A trim deallocates its range on the device: flash behind an FTL stops copying it
            // (the spec makes trimmed data undefined until rewritten, so it may stay). With
            // FUA it is followed by a flush, like a write.
            CheckedRequest::Trim {
                offset_bytes,
                len_bytes,
                fua,
            } => (Opcode::Deallocate, offset_bytes, len_bytes, fua),
            CheckedRequest::Flush => (Opcode::Flush, 0, 0, false),
            CheckedRequest::Read {
                offset_bytes,
                len_bytes,
            } => (Opcode::Read, offset_bytes, len_bytes, false),
            CheckedRequest::Write {
                offset_bytes,
                len_bytes,
                fua,
            }
            | CheckedRequest::WriteZeroes {
                offset_bytes,
                len_bytes,
                fua,
            } => (Opcode::Write, offset_bytes, len_bytes, fua),
        };
        Some(Work {
            kind,
            offset_bytes,
            len_bytes,
            fua,
            zeroes,
        })
    }

    /// Answers a zero-length read or write at once.
    fn answer_zero_length(&mut self, cookie: u64, kind: Opcode) {
        // A zero-length read or write: nothing to do (the spec leaves it undefined).
        if kind == Opcode::Read && self.structured {
            put_chunk_header(&mut self.out, cookie, REPLY_FLAG_DONE, REPLY_TYPE_NONE, 0);
        } else {
            put_simple_reply(&mut self.out, cookie, 0);
        }
        self.pace.answered();
    }

    /// Takes a free request slot for `work`, to be done in `commands` device commands, and
    /// returns it.
    fn open_request(&mut self, cookie: u64, work: Work, commands: u32, started: Instant) -> usize {
        let slot = self
            .free_slots
            .pop()
            .expect("caller checked a slot is free");
        debug_assert!(
            self.requests[slot].is_none(),
            "free request slot {slot}: expected it empty, found request {:#x} in it",
            self.requests[slot].as_ref().map_or(0, |r| r.cookie)
        );
        if work.kind == Opcode::Read {
            self.read_bytes_live += u64::from(work.len_bytes);
            // A request is taken only while within the budget, and adds at most one payload.
            debug_assert!(
                self.read_bytes_live < READ_BYTES_BUDGET + u64::from(PAYLOAD_BYTES_MAX),
                "read bytes in flight over the budget: expected < {READ_BYTES_BUDGET} + \
                 {PAYLOAD_BYTES_MAX}, found {}",
                self.read_bytes_live
            );
        }
        let assembled = (work.kind == Opcode::Read && !self.structured && commands > 1)
            .then(|| vec![0u8; work.len_bytes as usize]);
        self.requests[slot] = Some(Request {
            cookie,
            kind: work.kind,
            offset_bytes: work.offset_bytes,
            len_bytes: work.len_bytes,
            commands_left: 0,
            unissued: commands,
            fua: work.fua,
            error: None,
            assembled,
            done_sent: false,
            started,
            #[cfg(debug_assertions)]
            payload_left: if work.kind == Opcode::Write && !work.zeroes {
                u64::from(work.len_bytes)
            } else {
                0
            },
        });
        slot
    }

    /// Issues the commands of request `slot` from `at` bytes into its range: one flush, or one
    /// command per largest command's bytes. A command that finds no tag parks the rest.
    fn issue_commands(&mut self, slot: usize, work: Work, mut at: u32) -> io::Result<()> {
        if work.kind == Opcode::Flush {
            if !self.issue(slot, Opcode::Flush, 0, 0, Payload::None)? {
                self.parked = Some(Parked { slot, work, at });
            }
            return Ok(());
        }
        let step = self.device.command_bytes_max();
        while at < work.len_bytes {
            let n = step.min(work.len_bytes - at);
            let offset = work.offset_bytes + u64::from(at);
            let payload = match work.kind {
                Opcode::Read => Payload::None,
                Opcode::Write if work.zeroes => Payload::Zeroes,
                Opcode::Write => Payload::Socket,
                Opcode::Deallocate => Payload::None,
                Opcode::Flush => unreachable!("handled above"),
                // NBD has no zone commands: a zoned namespace's writes reach it as writes.
                Opcode::ZoneAppend | Opcode::ZoneManage { .. } | Opcode::ZoneReport { .. } => {
                    unreachable!("NBD requests are reads, writes, flushes and trims")
                }
            };
            if !self.issue(slot, work.kind, offset, n, payload)? {
                self.parked = Some(Parked { slot, work, at });
                return Ok(());
            }
            at += n;
        }
        Ok(())
    }

    /// Issues one command of request `slot`, waiting for one of this connection's commands to
    /// complete if every tag is in flight or it holds its share of them. Returns false, having
    /// changed nothing, when no tag is free and none of its own commands is in flight (other
    /// connections hold them all): the caller parks the command.
    fn issue(
        &mut self,
        slot: usize,
        op: Opcode,
        offset_bytes: u64,
        len_bytes: u32,
        payload: Payload,
    ) -> io::Result<bool> {
        #[cfg(debug_assertions)]
        self.debug_check_command(op, offset_bytes, len_bytes);
        let mut prepared = loop {
            let data = match payload {
                Payload::Zeroes => Some(&self.zeroes[..len_bytes as usize]),
                _ => None,
            };
            if !self.seat.may_issue(self.commands_in_flight) {
                // Other connections are active: wait for one of ours to give a tag back.
                self.reap(true);
                continue;
            }
            match self.device.prepare(op, offset_bytes, len_bytes, data) {
                Ok(p) => break p,
                Err(HostError::NoTag { .. }) => {
                    // Other commands (ours or other connections') hold every tag.
                    if self.commands_in_flight == 0 {
                        return Ok(false);
                    }
                    self.reap(true);
                }
                Err(e) => {
                    // The request was checked against the same limits; a refusal here is a
                    // bug, reported to the client as an I/O error rather than trusted.
                    self.command_failed(slot, e.to_string());
                    if payload == Payload::Socket {
                        self.input.skip(&self.stream, len_bytes as usize)?;
                        #[cfg(debug_assertions)]
                        self.payload_consumed(slot, len_bytes);
                    }
                    self.maybe_finish(slot);
                    return Ok(true);
                }
            }
        };
        if payload == Payload::Socket {
            let buffer = self.device.write_buffer(&mut prepared);
            // Exactly this command's share of the payload comes off the socket.
            debug_assert_eq!(
                buffer.len(),
                len_bytes as usize,
                "write buffer for {len_bytes} payload bytes: expected {len_bytes} bytes, found {}",
                buffer.len()
            );
            if let Err(e) = self.input.read_exact(&self.stream, buffer) {
                self.device.cancel(prepared);
                self.command_failed(slot, e.to_string());
                self.closing = true;
                self.maybe_finish(slot);
                return Err(e);
            }
            #[cfg(debug_assertions)]
            self.payload_consumed(slot, len_bytes);
        }
        self.issue_prepared(slot, prepared);
        Ok(true)
    }

    /// A command of request `slot` that was not issued: the request fails with `message`
    /// (its first error is kept).
    #[inline]
    fn command_failed(&mut self, slot: usize, message: String) {
        let request = self.requests[slot].as_mut().expect("live request");
        request.unissued -= 1;
        request.error.get_or_insert((NbdErrno::Io, message));
    }

    /// Issues `prepared`, a command of request `slot` with its data in place, and counts it
    /// in flight, its tag leading back to the request.
    #[inline]
    fn issue_prepared(&mut self, slot: usize, prepared: Prepared) {
        let tag = prepared.tag().index();
        // Completions find their request by tag (`complete`, which frees it in debug builds).
        debug_assert_eq!(
            self.tag_slot[tag],
            usize::MAX,
            "issuing on tag {tag} for request slot {slot}: expected the tag free, found it on \
             slot {}",
            self.tag_slot[tag]
        );
        self.tag_slot[tag] = slot;
        let request = self.requests[slot].as_mut().expect("live request");
        request.unissued -= 1;
        request.commands_left += 1;
        self.commands_in_flight += 1;
        self.qp.issue(prepared);
        debug_assert_eq!(
            self.commands_in_flight,
            self.qp.in_flight(),
            "commands in flight after an issue: expected the connection's count ({}) to be the \
             queue pair's ({})",
            self.commands_in_flight,
            self.qp.in_flight()
        );
    }

    /// A command as `issue` may send it (debug builds): `check_request` let only ranges inside
    /// the export through, and commands are cut from them at multiples of the largest
    /// command, itself whole blocks (`Device::open`).
    #[cfg(debug_assertions)]
    fn debug_check_command(&self, op: Opcode, offset_bytes: u64, len_bytes: u32) {
        debug_assert!(
            op == Opcode::Flush
                || offset_bytes
                    .checked_add(u64::from(len_bytes))
                    .is_some_and(|end| end <= self.limits.size_bytes),
            "{op:?} command outside the export: expected {offset_bytes} + {len_bytes} <= {}",
            self.limits.size_bytes
        );
        debug_assert!(
            offset_bytes.is_multiple_of(u64::from(self.limits.block_bytes)),
            "{op:?} command unaligned: expected offset {offset_bytes} a multiple of {}",
            self.limits.block_bytes
        );
        debug_assert!(
            len_bytes <= self.device.command_bytes_max(),
            "{op:?} command larger than a tag buffer: expected at most {} bytes, found {len_bytes}",
            self.device.command_bytes_max()
        );
    }

    /// Counts `len_bytes` of request `slot`'s write payload as read or skipped.
    #[cfg(debug_assertions)]
    fn payload_consumed(&mut self, slot: usize, len_bytes: u32) {
        let request = self.requests[slot].as_mut().expect("live request");
        assert!(
            u64::from(len_bytes) <= request.payload_left,
            "request {:#x} consumed past its payload: expected at most {} more bytes, found {}",
            request.cookie,
            request.payload_left,
            len_bytes
        );
        request.payload_left -= u64::from(len_bytes);
    }

    /// FUA writes whose data is done: issue their flush (those that find no tag wait for the
    /// next turn).
    fn issue_fua_flushes(&mut self) {
        while let Some(&slot) = self.fua_pending.last() {
            let request = self.requests[slot].as_mut().expect("live request");
            // A FUA write's flush follows its data commands, once, and only if they succeeded.
            debug_assert!(
                request.fua && request.error.is_none(),
                "FUA flush of request {:#x}: expected it pending and the data written, found \
                 fua={} error={:?}",
                request.cookie,
                request.fua,
                request.error
            );
            debug_assert_eq!(
                (request.commands_left, request.unissued),
                (0, 0),
                "FUA flush of request {:#x} before its data is done: expected no data command \
                 left, found {} in flight and {} to issue",
                request.cookie,
                request.commands_left,
                request.unissued
            );
            request.fua = false;
            request.unissued = 1;
            // A flush carries no payload; it cannot fail the socket.
            let issued = self
                .issue(slot, Opcode::Flush, 0, 0, Payload::None)
                .expect("a flush reads nothing from the socket");
            if !issued {
                let request = self.requests[slot].as_mut().expect("live request");
                request.fua = true;
                request.unissued = 0;
                return;
            }
            self.fua_pending.pop();
        }
    }

    /// Collects completions (waiting for at least one when `block`) and answers the requests
    /// they finish. Returns how many commands completed.
    fn reap(&mut self, block: bool) -> usize {
        if self.commands_in_flight == 0 {
            return 0;
        }
        let finished = &mut self.finished;
        let n = if block {
            let n = self.qp.wait(|d| finished.push(d));
            self.now = self.clock.now();
            n
        } else {
            let n = self.qp.poll(|d| finished.push(d));
            if n > 0 {
                self.now = self.clock.now();
            }
            n
        };
        let mut finished = std::mem::take(&mut self.finished);
        for done in finished.drain(..) {
            self.complete(done);
        }
        self.finished = finished;
        debug_assert_eq!(
            self.commands_in_flight,
            self.qp.in_flight(),
            "commands in flight after completions: expected the connection's count ({}) to be \
             the queue pair's ({})",
            self.commands_in_flight,
            self.qp.in_flight()
        );
        n
    }

    fn complete(&mut self, done: Done) {
        self.commands_in_flight -= 1;
        if self.commands_in_flight == 0 {
            self.seat.idle(); // active again at its next command
        }
        let tag = done.tag.index();
        let slot = self.tag_slot[tag];
        debug_assert_ne!(
            slot,
            usize::MAX,
            "completion on tag {tag}: expected a command of this connection on it, found none"
        );
        #[cfg(debug_assertions)]
        {
            self.tag_slot[tag] = usize::MAX;
        }
        let request = self.requests[slot]
            .as_mut()
            .expect("a completion of a live request");
        debug_assert!(
            done.op == request.kind || done.op == Opcode::Flush,
            "completion of a {:?} on request {:#x}: expected its own {:?} or its FUA flush",
            done.op,
            request.cookie,
            request.kind
        );
        request.commands_left -= 1;
        if done.status.is_ok() {
            if done.op == Opcode::Read {
                let data = self.device.read_data(&done);
                request.put_read_data(data, done.offset_bytes, &mut self.out, self.structured);
            }
        } else {
            let message = format!(
                "device error on {:?} at offset {} of {} bytes: {}",
                done.op, done.offset_bytes, done.len_bytes, done.status
            );
            request.error.get_or_insert((NbdErrno::Io, message));
        }
        // The status was read above; the tag goes back to the pool.
        let _ = self.device.finish(done, None);
        self.maybe_finish(slot);
    }

    /// Answers request `slot` once all its commands are done (or starts its FUA flush).
    fn maybe_finish(&mut self, slot: usize) {
        let request = self.requests[slot].as_ref().expect("live request");
        if request.commands_left > 0 || request.unissued > 0 {
            return;
        }
        if request.fua && request.error.is_none() {
            self.fua_pending.push(slot);
            return;
        }
        let request = self.requests[slot].take().expect("live request");
        // Answered only once every command is done: no tag may still lead here.
        debug_assert!(
            !self.tag_slot.contains(&slot),
            "answering request {:#x}: expected none of its commands in flight, found one on tag \
             {:?}",
            request.cookie,
            self.tag_slot.iter().position(|&s| s == slot)
        );
        #[cfg(debug_assertions)]
        assert!(
            request.payload_left == 0 || self.closing,
            "answering request {:#x}: expected its write payload read, found {} bytes still on \
             the socket",
            request.cookie,
            request.payload_left
        );
        self.free_slots.push(slot);
        let is_read = request.kind == Opcode::Read;
        if is_read {
            debug_assert!(
                self.read_bytes_live >= u64::from(request.len_bytes),
                "read bytes in flight: expected at least this read's {}, found {}",
                request.len_bytes,
                self.read_bytes_live
            );
            self.read_bytes_live -= u64::from(request.len_bytes);
        }
        self.answer(&request, is_read);
        if request.error.is_none() {
            self.count_answered(&request, is_read);
        }
    }

    /// Puts the reply to `request` (a read if `is_read`), all of whose commands are done,
    /// into `out`: its error, or the rest of its data or its final chunk, or a plain success.
    #[inline]
    fn answer(&mut self, request: &Request, is_read: bool) {
        match &request.error {
            Some((errno, message)) => {
                if self.structured && is_read && request.done_sent {
                    unreachable!("the final chunk is only sent without an error");
                }
                self.reply_error(request.cookie, is_read, *errno, message);
            }
            None if is_read => {
                debug_assert!(
                    self.structured || request.assembled.is_some() || request.done_sent,
                    "simple read reply to {:#x}: expected its data sent or assembled, found \
                     neither",
                    request.cookie
                );
                if let Some(data) = &request.assembled {
                    put_simple_reply(&mut self.out, request.cookie, 0);
                    self.out.extend_from_slice(data);
                } else if !request.done_sent {
                    put_chunk_header(
                        &mut self.out,
                        request.cookie,
                        REPLY_FLAG_DONE,
                        REPLY_TYPE_NONE,
                        0,
                    );
                }
                self.pace.answered();
            }
            None => self.reply_ok(request.cookie),
        }
    }

    /// Counts the successful `request` (a read if `is_read`), answered now, for the
    /// connection's statistics (recorded in batches, `record_stats`).
    #[inline]
    fn count_answered(&mut self, request: &Request, is_read: bool) {
        let latency_ns = self
            .now
            .saturating_duration_since(request.started)
            .as_nanos() as u64;
        let len = match request.kind {
            Opcode::Flush | Opcode::Deallocate => 0,
            _ => request.len_bytes,
        };
        // Flushes and trims count as requests of no bytes: neither moves data.
        if self.unrecorded.len() == self.unrecorded.capacity() {
            self.record_stats();
        }
        self.unrecorded.push((is_read, len, latency_ns));
    }

    /// Records the requests answered since the last call in the connection's statistics.
    /// Called before replies are sent (and every `REQUESTS_MAX` answers), so a request whose
    /// reply a client has seen is in the report.
    fn record_stats(&mut self) {
        if self.unrecorded.is_empty() {
            return;
        }
        let mut stats = self.session.stats.lock().expect("stats lock poisoned");
        for &(is_read, len, latency_ns) in &self.unrecorded {
            stats.record_host(is_read, len, latency_ns);
        }
        drop(stats);
        self.unrecorded.clear();
    }

    fn reply_ok(&mut self, cookie: u64) {
        put_simple_reply(&mut self.out, cookie, 0);
        self.pace.answered();
    }

    /// An error reply: a structured error chunk with the message when structured replies were
    /// negotiated (required for reads, preferred for the rest), else a simple reply.
    fn reply_error(&mut self, cookie: u64, is_read: bool, errno: NbdErrno, message: &str) {
        if self.structured {
            put_error_chunk(&mut self.out, cookie, errno, message);
        } else {
            let _ = is_read;
            put_simple_reply(&mut self.out, cookie, errno as u32);
        }
        self.pace.answered();
    }

    /// Sends the replies in `out`. While the client takes none, the connection goes on
    /// collecting its commands' completions, so that the device tags they hold go back to
    /// the other connections instead of waiting on this client (the replies pile up in `out`,
    /// within `READ_BYTES_BUDGET`); only with nothing left in flight does it wait for the
    /// client, at most `io::STALL_MAX`.
    fn send_replies(&mut self) -> io::Result<()> {
        self.record_stats();
        loop {
            let before = self.out.len();
            let all = write_some(&self.stream, &mut self.out)?;
            self.pace.sent(before - self.out.len());
            if all {
                return Ok(());
            }
            if self.commands_in_flight == 0 {
                return self.send_all_replies();
            }
            self.reap(true);
        }
    }

    /// Sends every reply in `out`, waiting (at most `io::STALL_MAX` at a time) for the client
    /// to make room.
    fn send_all_replies(&mut self) -> io::Result<()> {
        self.record_stats();
        self.pace.sent(self.out.len());
        write_all(&self.stream, &mut self.out)
    }

    /// Nothing happened on the last pass: wait a little for the device or the client. With
    /// device threads, spin; inline, nap in `ppoll` on the socket (woken early by new
    /// requests) for as long as the driver says a nap cannot make a completion late.
    fn wait_a_little(&mut self) {
        match self.qp.nap_time() {
            Some(nap) if !self.closing => {
                // Replies already computed go out before the nap.
                if self.send_replies().is_ok() && self.commands_in_flight > 0 {
                    // A wake-up by new input is fine: the loop reads it next.
                    let _ = self.stream.wait_ready(libc::POLLIN, Some(nap));
                }
            }
            _ => std::hint::spin_loop(),
        }
    }
}
