//! What serving a connection takes, with a listener or without: the device and its export,
//! the serving slots, the idle queue pairs, every session's statistics and the device's tag
//! shares. The server's connection threads (`server`) and the deterministic simulation
//! (`simulation`) both serve through it, so both run the same handshake and the same
//! transmission phase.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nvarray_host::tag_share::TagShare;
use nvarray_host::{Device, QueuePair};
use nvarray_run::served::{ServedStats, Session};

use crate::clock::Clock;
use crate::handshake::{negotiate, Export, Outcome};
use crate::io::Stream;
use crate::proto::ExportLimits;
use crate::transmission::{Negotiated, ServerLinks, Transmission};

/// Where messages go.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// The serving side of a server over one device.
pub struct Serving {
    pub device: Arc<Device>,
    pub export: Export,
    connections_max: usize,
    /// Connections serving now (each holds a `ServingSlot`).
    serving: Arc<AtomicUsize>,
    /// Idle queue pairs from connections that ended, reused by the next ones (building a
    /// pair's rings costs more than taking one from here; at most as many as were ever
    /// serving at once).
    queue_pairs: Mutex<Vec<QueuePair>>,
    /// Every connection's statistics, one stream per client host (`nvarray_run::served`).
    pub served: ServedStats,
    /// Each serving connection's fair share of the device's tags.
    tags: Arc<TagShare>,
    /// The connections' clock.
    pub clock: Clock,
}

/// A serving slot, given back when dropped.
pub struct ServingSlot(Arc<AtomicUsize>);

impl Drop for ServingSlot {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(
            before > 0,
            "serving connections: expected at least this one, found {before}"
        );
    }
}

impl Serving {
    /// Serving `device` as the export `export_name` (read-only or not), to at most
    /// `connections_max` connections at once, on `clock`.
    pub fn new(
        device: Arc<Device>,
        export_name: &str,
        read_only: bool,
        connections_max: usize,
        clock: Clock,
    ) -> Serving {
        let block_bytes = device.block_bytes();
        // What the request checks and the split into commands rely on (`DeviceConfig` and
        // `Device::open` check both): the preferred block size advertised is a power of two,
        // and a request cut at the largest command leaves every command whole blocks.
        assert!(
            block_bytes.is_power_of_two(),
            "device block size: expected a power of two, found {block_bytes}"
        );
        assert!(
            device.command_bytes_max().is_multiple_of(block_bytes),
            "largest device command: expected a multiple of the {block_bytes}-byte block, found \
             {}",
            device.command_bytes_max()
        );
        let export = Export {
            name: export_name.to_string(),
            description: format!(
                "nvarray emulated {} ({} bytes)",
                device.config().name,
                device.size_bytes()
            ),
            limits: ExportLimits {
                size_bytes: device.size_bytes(),
                block_bytes,
                read_only,
            },
            preferred_block_bytes: block_bytes.max(4096),
        };
        Serving {
            tags: Arc::new(TagShare::new(device.tags())),
            device,
            export,
            connections_max,
            serving: Arc::new(AtomicUsize::new(0)),
            queue_pairs: Mutex::new(Vec::new()),
            served: ServedStats::new(),
            clock,
        }
    }

    /// Takes a serving slot if fewer than `connections_max` connections are serving.
    fn take_serving_slot(&self) -> Result<ServingSlot, String> {
        let max = self.connections_max;
        self.serving
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| ServingSlot(Arc::clone(&self.serving)))
            .map_err(|_| {
                format!("nvarray serve: too many connections (limit {max}; see --connections)")
            })
    }

    /// The handshake on `stream` (see `handshake::negotiate`; `refuse` answers every option
    /// with that error), finished by `deadline`. When the client chose the export, its
    /// outcome comes with the serving slot it took.
    pub fn handshake(
        &self,
        stream: &mut Stream,
        refuse: Option<(u32, &str)>,
        deadline: Instant,
        log: &dyn Fn(&str),
    ) -> (io::Result<Outcome>, Option<ServingSlot>) {
        let mut slot = None;
        let outcome = negotiate(
            stream,
            &self.export,
            refuse,
            &mut || {
                slot = Some(self.take_serving_slot()?);
                Ok(())
            },
            deadline,
            &mut |m| log(m),
        );
        (outcome, slot)
    }

    /// The transmission phase of a connection that negotiated (`structured` replies or not)
    /// on `stream`: a session of its client host's stream, and an idle queue pair (or a new
    /// one).
    pub fn transmission(&self, stream: Stream, structured: bool, log: Log) -> Transmission {
        let session = self.served.open(&stream.host());
        let qp = self
            .queue_pairs
            .lock()
            .expect("queue pair lock poisoned")
            .pop()
            .unwrap_or_else(|| self.device.queue_pair(self.device.completion()));
        Transmission::new(
            Arc::clone(&self.device),
            qp,
            stream,
            self.export.limits,
            Negotiated { structured },
            ServerLinks {
                session,
                tags: Arc::clone(&self.tags),
                log,
                clock: self.clock.clone(),
            },
        )
    }

    /// After a connection's transmission phase (`Transmission::run` or `finish`): its queue
    /// pair kept for the next connection, its session closed, and its end logged unless the
    /// client simply went away.
    pub fn transmission_ended(
        &self,
        (qp, session, result): (QueuePair, Session, io::Result<()>),
        log: &dyn Fn(&str),
    ) {
        // The next connection gets this queue pair: none of this one's commands may complete
        // there.
        assert_eq!(
            qp.in_flight(),
            0,
            "queue pair handed on: expected nothing in flight, found {} commands",
            qp.in_flight()
        );
        self.queue_pairs
            .lock()
            .expect("queue pair lock poisoned")
            .push(qp);
        self.served.close(session);
        if let Err(e) = result {
            if !matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
            ) {
                log(&format!("closed: {e}"));
            }
        }
    }

    /// Flushes the device (a server's last act).
    pub fn flush(&self) -> Result<(), nvarray_host::HostError> {
        self.device
            .queue_pair(self.device.completion())
            .flush(&self.device)
    }
}

/// Where a connection's messages go: `log`, each line naming the connection.
pub fn connection_log(log: &Log, id: u64, stream: &Stream) -> Log {
    let address = stream.peer();
    let log = Arc::clone(log);
    Arc::new(move |m: &str| log(&format!("connection {id} ({address}): {m}")))
}
