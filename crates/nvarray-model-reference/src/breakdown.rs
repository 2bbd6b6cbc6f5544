//! Where a request's latency went: the components of OpenExpress's latency-decomposition
//! chart plus the host's share.

use serde::Serialize;

/// One part of a request's latency. The parts of one request add up to its latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Host software before the command is issued (set by the engine, not the device).
    Host,
    /// The network to a remote device and back (`[fabric]`): serialisation, hops, the
    /// adapters' overhead, and the remote CPU when it is on the path.
    Fabric,
    /// Delivering the command: PIO command word, or doorbell + SQ entry fetch + PRP list fetch.
    CommandFetch,
    /// Waiting: for a tag, a transfer buffer, a busy link, ring or bank, or earlier pieces.
    Queueing,
    /// Controller work: command processing and completion generation.
    Controller,
    /// The internal ring network.
    Ring,
    /// Media access in the banks.
    Media,
    /// Data transfer over the host link (DMA), including DMA read round trips.
    Link,
    /// Completion signalling: CQ entry / MSI, or interrupt + status read.
    Completion,
}

impl Component {
    pub const ALL: [Component; 9] = [
        Component::Host,
        Component::Fabric,
        Component::CommandFetch,
        Component::Queueing,
        Component::Controller,
        Component::Ring,
        Component::Media,
        Component::Link,
        Component::Completion,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Component::Host => "host",
            Component::Fabric => "fabric",
            Component::CommandFetch => "command_fetch",
            Component::Queueing => "queueing",
            Component::Controller => "controller",
            Component::Ring => "ring",
            Component::Media => "media",
            Component::Link => "link",
            Component::Completion => "completion",
        }
    }
}

/// Nanoseconds per component for one request (or summed over many).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub ns: [u64; Component::ALL.len()],
}

impl Breakdown {
    #[inline]
    pub fn get(&self, c: Component) -> u64 {
        self.ns[c as usize]
    }

    #[inline]
    pub fn set(&mut self, c: Component, ns: u64) {
        self.ns[c as usize] = ns;
    }

    #[inline]
    pub fn add(&mut self, other: &Breakdown) {
        for (a, b) in self.ns.iter_mut().zip(other.ns.iter()) {
            *a += b;
        }
    }

    pub fn total_ns(&self) -> u64 {
        self.ns.iter().sum()
    }
}
