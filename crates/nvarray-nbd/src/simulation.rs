//! The NBD server run by one thread, turn by turn, for deterministic simulation (issue 58): no
//! listening socket, no connection threads, clients on in-memory streams (`pipe`). Each
//! connection is served by the same code as the server's threads (`serving`: the handshake,
//! then the transmission phase's `turn`s), so a seeded test that drives clients, faults and
//! steps replays a failure exactly (`tests/simulation.rs`).
//!
//! The connections' clock is the simulation's (`clock::SimulatedTime`, moved on by the
//! caller: `time().advance`), so what a turn does never depends on the wall. Waiting is what
//! the server makes of a client that cannot act while the server runs: a handshake runs whole at the step after `connect`, on the bytes the client
//! has sent by then (a client that has sent too few is one silent for `HANDSHAKE_IDLE`), and a
//! request whose payload has not all been sent is a client stalled for `io::STALL_MAX`. Both
//! close the connection, as they would after those waits.

use std::io;
use std::sync::Arc;

use nvarray_host::Device;
use nvarray_report::RunReport;

use crate::clock::{Clock, SimulatedTime};
use crate::handshake::Outcome;
use crate::io::Stream;
use crate::pipe::MemoryPipe;
use crate::server::HANDSHAKE_TIMEOUT;
use crate::serving::{connection_log, Log, Serving, ServingSlot};
use crate::transmission::{Transmission, Turn};
use crate::NbdError;

/// Where a simulated connection is.
enum Phase {
    /// Connected; its handshake runs at the next step.
    Handshake(Stream),
    /// Serving, on its serving slot.
    Transmission(Box<Transmission>, ServingSlot),
    /// Closed (only while a step takes its phase).
    Closed,
}

struct Connection {
    id: u64,
    phase: Phase,
    /// A second handle on the server's end, for shutdown to close its reading side.
    stream: Stream,
    log: Log,
}

/// An NBD server without threads or sockets, stepped by its caller.
pub struct SimulatedServer {
    serving: Serving,
    time: Arc<SimulatedTime>,
    connections: Vec<Connection>,
    next_id: u64,
    log: Log,
}

impl SimulatedServer {
    /// A server exporting `device` as `export_name` (read-only or not) to at most
    /// `connections_max` serving connections, its messages to `log`.
    pub fn new(
        device: Arc<Device>,
        export_name: &str,
        read_only: bool,
        connections_max: usize,
        log: Log,
    ) -> SimulatedServer {
        let time = Arc::new(SimulatedTime::default());
        let clock = Clock::Simulated(Arc::clone(&time));
        SimulatedServer {
            serving: Serving::new(device, export_name, read_only, connections_max, clock),
            time,
            connections: Vec::new(),
            next_id: 0,
            log,
        }
    }

    /// A client connects: the connection's id and the client's end of the stream. Its
    /// handshake runs at the next `step`, on what it has sent by then.
    pub fn connect(&mut self) -> (u64, Stream) {
        let (client, server) = MemoryPipe::pair();
        let server = Stream::Memory(server);
        let id = self.next_id;
        self.next_id += 1;
        let log = connection_log(&self.log, id, &server);
        let stream = server.try_clone().expect("in-memory streams clone");
        self.connections.push(Connection {
            id,
            phase: Phase::Handshake(server),
            stream,
            log,
        });
        (id, Stream::Memory(client))
    }

    /// Whether connection `id` is still open (handshaking, serving, or finishing what its
    /// client left in flight).
    pub fn serves(&self, id: u64) -> bool {
        self.connections.iter().any(|c| c.id == id)
    }

    /// One step of every connection: a handshake, or a turn of the transmission phase. A
    /// connection whose client has gone (or broke the protocol) is finished and closed.
    /// Returns how many connections made progress.
    pub fn step(&mut self) -> usize {
        let mut progressed = 0;
        let mut i = 0;
        while i < self.connections.len() {
            let (advanced, open) = self.step_one(i);
            progressed += usize::from(advanced);
            if open {
                i += 1;
            } else {
                self.connections.swap_remove(i);
            }
        }
        progressed
    }

    /// Steps connection `i`: (whether it made progress, whether it stays open).
    fn step_one(&mut self, i: usize) -> (bool, bool) {
        let c = &mut self.connections[i];
        match std::mem::replace(&mut c.phase, Phase::Closed) {
            Phase::Handshake(mut stream) => {
                let deadline = self.time.now() + HANDSHAKE_TIMEOUT;
                let (outcome, slot) = self.serving.handshake(&mut stream, None, deadline, &*c.log);
                match outcome {
                    Ok(Outcome::Transmission { structured }) => {
                        let slot =
                            slot.expect("a client that chose the export holds a serving slot");
                        let t = self
                            .serving
                            .transmission(stream, structured, Arc::clone(&c.log));
                        c.phase = Phase::Transmission(Box::new(t), slot);
                        (true, true)
                    }
                    Ok(Outcome::Closed) => (true, false),
                    Err(e) => {
                        if e.kind() != io::ErrorKind::UnexpectedEof {
                            (c.log)(&format!("handshake failed: {e}"));
                        }
                        (true, false)
                    }
                }
            }
            Phase::Transmission(mut t, slot) => {
                let result = match t.turn() {
                    Ok(Turn::Closed) => Ok(()),
                    Ok(turn) => {
                        c.phase = Phase::Transmission(t, slot);
                        return (turn == Turn::Progressed, true);
                    }
                    Err(e) => Err(e),
                };
                self.serving.transmission_ended(t.finish(result), &*c.log);
                (true, false)
            }
            Phase::Closed => unreachable!("closed connections are removed at once"),
        }
    }

    /// The server's time (see `clock`): it moves only when the caller moves it, so what the
    /// connections do at each step depends on the seed alone.
    pub fn time(&self) -> &SimulatedTime {
        &self.time
    }

    /// Connections open (handshaking or serving).
    pub fn connections(&self) -> usize {
        self.connections.len()
    }

    /// The device report so far (as `Server::report`).
    pub fn report(&self) -> RunReport {
        self.serving.served.report(&self.serving.device, "nbd")
    }

    /// Stops as the server does: every connection's reading side closed, each finishes what
    /// it has in flight and sends its replies, then the device is flushed (the flush's error,
    /// as `Server::run` returns it).
    pub fn shutdown(mut self) -> Result<(), NbdError> {
        for c in &self.connections {
            c.stream.shutdown_read();
        }
        while !self.connections.is_empty() {
            self.step();
        }
        self.serving.flush().map_err(NbdError::Device)
    }
}
