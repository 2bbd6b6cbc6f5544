//! The network between the host and a remote device (`[fabric]`, `FabricConfig`): a command
//! crosses it as a request message before the device sees it, and its completion crosses it
//! back as a response message before the host does.
//!
//! `Fabric` sits in front of the device's own model (`DeviceModel` holds both): it holds a
//! command until its request arrives, then submits it to the device at that instant, and adds
//! the response's trip to each completion. Each direction of the wire is a `Timeline`, so
//! messages serialise behind each other at the fabric's bandwidth (a waiting message is
//! `queueing` in the breakdown); the hops and the adapters' overhead are pure delay. With
//! `kind = "tcp"` every message also takes a turn on one of the remote CPU's cores, before the
//! device on the way in and after it on the way out. What the network adds is the `fabric`
//! component of the breakdown.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::device::{Command, Completion, Op};
use crate::timeline::Timeline;
use nvarray_model::breakdown::Component;
use nvarray_model::config::{FabricConfig, FabricKind};

/// A command whose request message is on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Arrival {
    at_ns: u64,
    /// Submission order, so arrivals at one instant reach the device in the order sent.
    seq: u64,
    id: u64,
}

/// What the request's trip cost a command, kept until its completion comes back.
#[derive(Debug, Clone, Copy)]
struct Sent {
    cmd: Command,
    submit_ns: u64,
    waited_ns: u64,
    fabric_ns: u64,
}

/// One message's trip: when it arrives, and how its time splits into waiting and the fabric.
struct Trip {
    arrive_ns: u64,
    waited_ns: u64,
    fabric_ns: u64,
}

#[derive(Clone, Debug)]
pub struct Fabric {
    cfg: FabricConfig,
    to_device: Timeline,
    to_host: Timeline,
    /// The remote CPU's cores (`tcp`); empty when no CPU is on the path.
    remote_cpu: Vec<Timeline>,
    arriving: BinaryHeap<Reverse<Arrival>>,
    /// Commands sent, by id, until their completion comes back.
    sent: HashMap<u64, Sent>,
    seq: u64,
}

impl Fabric {
    /// The fabric of `cfg`, or `None` for a local device (`kind = "none"`).
    pub fn new(cfg: &FabricConfig) -> Option<Self> {
        let cores = match cfg.kind {
            FabricKind::None => return None,
            FabricKind::Rdma => 0,
            FabricKind::Tcp => cfg.remote_cpu_cores as usize,
        };
        Some(Fabric {
            cfg: cfg.clone(),
            to_device: Timeline::new(),
            to_host: Timeline::new(),
            remote_cpu: vec![Timeline::new(); cores],
            arriving: BinaryHeap::new(),
            sent: HashMap::new(),
            seq: 0,
        })
    }

    /// Sends `cmd`'s request at `now_ns`; the device gets it at the time `next_arrival_ns`
    /// says. The command must already have passed the device's checks.
    pub fn send(&mut self, cmd: Command, now_ns: u64) {
        let data = if cmd.op == Op::Write {
            cmd.len_bytes
        } else {
            0
        };
        let Trip {
            arrive_ns,
            waited_ns,
            fabric_ns,
        } = self.trip(true, now_ns, now_ns, data);
        self.seq += 1;
        self.arriving.push(Reverse(Arrival {
            at_ns: arrive_ns,
            seq: self.seq,
            id: cmd.id,
        }));
        let sent = Sent {
            cmd,
            submit_ns: now_ns,
            waited_ns,
            fabric_ns,
        };
        let earlier = self.sent.insert(cmd.id, sent);
        debug_assert!(
            earlier.is_none(),
            "two commands in flight with id {}",
            cmd.id
        );
    }

    /// When the next request reaches the device, if one is on its way.
    pub fn next_arrival_ns(&self) -> Option<u64> {
        self.arriving.peek().map(|a| a.0.at_ns)
    }

    /// The command whose request arrives next, if it arrives at or before `now_ns`.
    pub fn arrive(&mut self, now_ns: u64) -> Option<(Command, u64)> {
        if self.next_arrival_ns()? > now_ns {
            return None;
        }
        let Reverse(a) = self.arriving.pop().expect("peeked");
        Some((self.sent[&a.id].cmd, a.at_ns))
    }

    /// Requests on their way to the device.
    pub fn in_transit(&self) -> usize {
        self.arriving.len()
    }

    /// The device's completion `c`, reported at `now_ns`, as the host sees it: the response's
    /// trip booked from the moment the device made it visible, and the command's submission
    /// time and breakdown restored to the host's.
    pub fn respond(&mut self, mut c: Completion, now_ns: u64) -> Completion {
        let sent = self
            .sent
            .remove(&c.id)
            .expect("a completion of a command the fabric sent");
        let data = if c.op == Op::Read { c.len_bytes } else { 0 };
        let back = self.trip(false, now_ns, c.visible_ns, data);
        let b = &mut c.breakdown;
        b.set(
            Component::Queueing,
            b.get(Component::Queueing) + sent.waited_ns + back.waited_ns,
        );
        b.set(
            Component::Fabric,
            b.get(Component::Fabric) + sent.fabric_ns + back.fabric_ns,
        );
        c.submit_ns = sent.submit_ns;
        c.visible_ns = back.arrive_ns;
        debug_assert_eq!(
            c.breakdown.total_ns(),
            c.visible_ns - c.submit_ns,
            "the fabric's breakdown adds up"
        );
        c
    }

    /// One message of `data` bytes, ready at `ready_ns` (booked at `now_ns`), towards the
    /// device or the host. The remote CPU handles it after the wire on the way in and before
    /// it on the way out.
    fn trip(&mut self, to_device: bool, now_ns: u64, ready_ns: u64, data: u32) -> Trip {
        let bytes = u64::from(self.cfg.header_bytes) + u64::from(data);
        let mut t = ready_ns;
        let mut waited_ns = 0;
        let mut fabric_ns = 0;
        if !to_device {
            (t, waited_ns, fabric_ns) = self.remote_cpu(now_ns, t, bytes, waited_ns, fabric_ns);
        }
        let wire = if to_device {
            &mut self.to_device
        } else {
            &mut self.to_host
        };
        let serialise_ns = (bytes * 1_000_000_000).div_ceil(self.cfg.bandwidth_bytes_per_s);
        let start = wire.reserve(now_ns, t, serialise_ns);
        let delay_ns = serialise_ns
            + u64::from(self.cfg.hops) * self.cfg.hop_latency_ns
            + self.cfg.message_overhead_ns;
        waited_ns += start - t;
        fabric_ns += delay_ns;
        t = start + delay_ns;
        if to_device {
            (t, waited_ns, fabric_ns) = self.remote_cpu(now_ns, t, bytes, waited_ns, fabric_ns);
        }
        Trip {
            arrive_ns: t,
            waited_ns,
            fabric_ns,
        }
    }

    /// A turn on the remote CPU core free soonest (none without a CPU on the path).
    fn remote_cpu(
        &mut self,
        now_ns: u64,
        ready_ns: u64,
        bytes: u64,
        waited_ns: u64,
        fabric_ns: u64,
    ) -> (u64, u64, u64) {
        let Some(core) = self
            .remote_cpu
            .iter_mut()
            .min_by_key(|c| c.busy_until_ns().max(ready_ns))
        else {
            return (ready_ns, waited_ns, fabric_ns);
        };
        let copy_ns = match self.cfg.remote_cpu_bytes_per_s {
            0 => 0,
            rate => (bytes * 1_000_000_000).div_ceil(rate),
        };
        let cpu_ns = self.cfg.remote_cpu_ns + copy_ns;
        let start = core.reserve(now_ns, ready_ns, cpu_ns);
        (
            start + cpu_ns,
            waited_ns + (start - ready_ns),
            fabric_ns + cpu_ns,
        )
    }

    /// Cores of the remote CPU on the path (0 for RDMA).
    pub fn remote_cpu_cores(&self) -> u32 {
        self.remote_cpu.len() as u32
    }

    /// Busy time so far of each direction of the wire and of the remote CPU's cores together.
    pub fn busy_ns(&self) -> (u64, u64, u64) {
        (
            self.to_device.busy_ns_total(),
            self.to_host.busy_ns_total(),
            self.remote_cpu.iter().map(Timeline::busy_ns_total).sum(),
        )
    }
}
