//! The null device (`[model] kind = "null"`): every command completes a fixed latency after it
//! is submitted, with no link, controller, buffer, ring or bank to share, like Linux's
//! `null_blk` with `completion_nsec`.
//!
//! Two uses: a target for testing software against a device that is never the bottleneck,
//! and the emulator's own path measured alone (`nvarray bench --preset null`): with the
//! model's cost near zero, what is left of a request's time and of the device thread's
//! budget is rings, decoding, validation, data and posting.
//!
//! One fixed latency keeps completions in submission order, so the commands in flight are a
//! FIFO queue and the next event is its front: no event heap.

use std::collections::VecDeque;

use crate::breakdown::{Breakdown, Component};
use crate::config::DeviceConfig;
use crate::device::{check_submit, Command, Completion, ResourceBusy};
use crate::error::CommandError;

#[derive(Clone, Debug)]
pub struct NullModel {
    cfg: DeviceConfig,
    latency_ns: u64,
    now_ns: u64,
    /// Commands in flight, in submission order, which is also their completion order.
    in_flight: VecDeque<Completion>,
    commands_done: u64,
    /// Command-nanoseconds in flight, summed (reported as the tags' busy time).
    held_ns: u64,
}

impl NullModel {
    pub fn new(cfg: &DeviceConfig) -> Self {
        NullModel {
            latency_ns: cfg.model.null_latency_ns,
            now_ns: 0,
            in_flight: VecDeque::with_capacity(cfg.controller.tags as usize),
            commands_done: 0,
            held_ns: 0,
            cfg: cfg.clone(),
        }
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// See `DeviceModel::submit`: the same contract, the same checks.
    pub fn submit(&mut self, cmd: Command, now_ns: u64) -> Result<(), CommandError> {
        check_submit(&self.cfg, &cmd, now_ns, self.now_ns, self.next_event_ns())?;
        self.now_ns = now_ns;
        let mut breakdown = Breakdown::default();
        // The whole latency is the device's service time; a null device has no parts.
        breakdown.set(Component::Media, self.latency_ns);
        self.in_flight.push_back(Completion {
            id: cmd.id,
            op: cmd.op,
            len_bytes: cmd.len_bytes,
            submit_ns: now_ns,
            visible_ns: now_ns + self.latency_ns,
            breakdown,
        });
        Ok(())
    }

    #[inline]
    pub fn next_event_ns(&self) -> Option<u64> {
        self.in_flight.front().map(|c| c.visible_ns)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub fn advance(&mut self, now_ns: u64, mut on_complete: impl FnMut(Completion)) {
        while let Some(&done) = self.in_flight.front() {
            if done.visible_ns > now_ns {
                break;
            }
            self.in_flight.pop_front();
            self.commands_done += 1;
            self.held_ns += self.latency_ns;
            on_complete(done);
        }
        self.now_ns = self.now_ns.max(now_ns);
    }

    /// Nothing is shared, so nothing is busy; the commands in flight hold tags.
    pub fn resource_busy(&self) -> ResourceBusy {
        ResourceBusy {
            controller_engines: 1,
            banks: 1,
            buffers: 1,
            tags_ns: self.held_ns,
            tags: self.cfg.controller.tags,
            ..ResourceBusy::default()
        }
    }

    pub fn commands_done(&self) -> u64 {
        self.commands_done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Op;
    use crate::presets::preset;

    fn null(latency: &str) -> NullModel {
        let cfg = preset("null")
            .unwrap()
            .load(&[("model.null_latency_ns".into(), latency.into())])
            .unwrap();
        NullModel::new(&cfg)
    }

    fn read(id: u64, offset_bytes: u64) -> Command {
        Command {
            id,
            op: Op::Read,
            offset_bytes,
            len_bytes: 4096,
            placement: 0,
        }
    }

    #[test]
    fn every_command_completes_its_latency_after_submission_in_order() {
        let mut dev = null("1us");
        dev.submit(read(1, 0), 100).unwrap();
        dev.submit(read(2, 4096), 100).unwrap();
        dev.submit(read(3, 8192), 400).unwrap();
        assert_eq!(dev.next_event_ns(), Some(1100));
        let mut done = Vec::new();
        dev.advance(1099, |c| {
            done.push((c.id, c.visible_ns, c.breakdown.total_ns()))
        });
        assert!(done.is_empty(), "nothing is due before 1100");
        dev.advance(1400, |c| {
            done.push((c.id, c.visible_ns, c.breakdown.total_ns()))
        });
        assert_eq!(
            done,
            vec![(1, 1100, 1000), (2, 1100, 1000), (3, 1400, 1000)]
        );
        assert_eq!(dev.in_flight(), 0);
        assert_eq!(dev.next_event_ns(), None);
        assert_eq!(dev.resource_busy().tags_ns, 3000);
    }

    #[test]
    fn zero_latency_completes_at_submission() {
        let mut dev = null("0");
        dev.submit(read(7, 0), 50).unwrap();
        let mut done = Vec::new();
        dev.advance(50, |c| done.push((c.id, c.visible_ns)));
        assert_eq!(done, vec![(7, 50)]);
    }

    #[test]
    fn a_bad_command_is_refused_and_changes_nothing() {
        let mut dev = null("0");
        let size = dev.config().memory.capacity_bytes;
        assert!(matches!(
            dev.submit(read(1, size), 0),
            Err(CommandError::OutOfRange { .. })
        ));
        assert!(matches!(
            dev.submit(read(1, 3), 0),
            Err(CommandError::Misaligned { .. })
        ));
        assert_eq!(dev.in_flight(), 0);
    }
}
