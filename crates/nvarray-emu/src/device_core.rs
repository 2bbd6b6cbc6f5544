//! The device side of the emulator: the timing model against the wall clock, with real data.
//!
//! `DeviceCore` takes commands (already popped from a submission ring), validates them before
//! touching data, moves the data, drives `nvarray_model::DeviceModel` with the wall clock, and
//! posts each completion once the clock has reached the model's deadline — never earlier.
//! Whoever polls it (a device thread, or a host thread in inline mode) calls `poll`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use nvarray_model::{Breakdown, Command, DeviceConfig, DeviceModel, Op};

use crate::backing::{Backing, BackingKind, BackingPages};
use crate::clock::Clock;
use crate::error::EmuError;
use crate::lateness::Lateness;
use crate::protocol::{Opcode, Status};
use crate::tag_pool::Tag;

/// A command as the device sees it: which queue pair and tag it came from, and what it asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submission {
    pub queue: u16,
    /// As the command carried it: not yet checked against the device's tags.
    pub tag: Tag,
    pub op: Opcode,
    pub offset_bytes: u64,
    pub len_bytes: u32,
}

/// A completion ready to post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Posted {
    pub queue: u16,
    pub tag: Tag,
    pub status: Status,
    /// The model's deadline and the time the completion was posted.
    pub deadline_ns: u64,
    pub posted_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    submission: Submission,
    submit_ns: u64,
    /// A small read whose data is still to be copied, when the model finishes it (see
    /// `submit`).
    copy_when_done: bool,
    /// The status to post (a failed late copy turns it into `IoError`).
    status: Status,
}

/// Reads up to this size are copied into the host's buffer when the model finishes them (the
/// moment the device learns the completion time, some hundreds of ns before it), from data
/// prefetched into the cache at submission; larger reads are copied at submission.
///
/// A random 512-byte read of a large device is a DRAM and TLB miss (~300 ns on the test VMs,
/// half of the device thread's time per command at QD 32); prefetching it at submission
/// overlaps that miss with the command's modelled time and with other commands, and the late
/// copy then costs a cache hit, done before the deadline rather than after it. A large read's
/// copy takes long enough to make its own and its neighbours' completions late, so it is
/// done at submission instead. From 4 KiB it is large: copying a prefetched 4 KiB block into
/// a tag buffer the host's core touched last takes 0.3-1 µs even with vector moves
/// (`dma_copy`), against the moneta preset's ~2 µs between the model finishing a read and
/// its deadline; moved to submission, moneta's 4 KiB QD 1 lateness p99 went from 1.74-2.32 µs
/// to 1.45-1.70 µs and QD 32's from 6.1-6.9 µs to 4.4-4.9 µs at the same IOPS
/// (`docs/perf.md`, "The 4 KiB lateness tail").
pub const COPY_WHEN_DONE_MAX_BYTES: u32 = 2048;

/// Commands in flight at most (bounds the bookkeeping; the model's tags bound it further).
pub const IN_FLIGHT_MAX: usize = 1 << 16;

pub struct DeviceCore {
    model: DeviceModel,
    backing: Backing,
    clock: Clock,
    lateness: Lateness,
    in_flight: Vec<Option<InFlight>>,
    free_ids: Vec<u32>,
    /// Completions the model has produced, by deadline.
    due: BinaryHeap<Reverse<(u64, u32)>>,
    /// Commands that completed at once (refused, or flush): posted on the next poll.
    immediate: Vec<Posted>,
    /// Sum of the model's breakdowns of every completed command, and their number.
    modelled_sum: Breakdown,
    modelled_count: u64,
}

impl DeviceCore {
    pub fn open(config: &DeviceConfig, backing: &BackingKind) -> Result<Self, EmuError> {
        let backing = Backing::open(backing, config.memory.capacity_bytes)?;
        Ok(DeviceCore {
            model: DeviceModel::new(config),
            backing,
            clock: Clock::new(),
            lateness: Lateness::new(),
            in_flight: Vec::new(),
            free_ids: Vec::new(),
            due: BinaryHeap::new(),
            immediate: Vec::new(),
            modelled_sum: Breakdown::default(),
            modelled_count: 0,
        })
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub fn lateness(&self) -> &Lateness {
        &self.lateness
    }

    /// The timing model (for its utilisation and wear figures).
    pub fn model(&self) -> &DeviceModel {
        &self.model
    }

    /// Accepts a command that the device took from a queue at `now_ns`: a clock reading taken
    /// after the command was in the queue, and after `advance(now_ns, ..)`, so the model has done
    /// everything due before the command arrived. `buffer` is the command's DMA buffer, owned by the device
    /// until the completion is posted: a write's data is taken from it now; a read's data is
    /// put in it now, or for a small read when the model finishes it
    /// (`COPY_WHEN_DONE_MAX_BYTES`). The
    /// host cannot look at the buffer before the completion, so when the copy happens inside
    /// the command's lifetime is invisible to it, as with commands in flight on a real
    /// device: overlapping commands in flight have no defined order (NVMe leaves it to the
    /// host). A refused command is posted with its error status on the next poll and changes
    /// nothing.
    pub fn submit(&mut self, s: Submission, buffer: &mut [u8], now_ns: u64) {
        let refuse = |core: &mut Self, status| {
            core.immediate.push(Posted {
                queue: s.queue,
                tag: s.tag,
                status,
                deadline_ns: now_ns,
                posted_ns: now_ns,
            })
        };
        if s.op == Opcode::Flush {
            let status = if self.backing.flush().is_ok() {
                Status::Ok
            } else {
                Status::IoError
            };
            return refuse(self, status);
        }
        if let Err(e) = self.model.check(s.offset_bytes, s.len_bytes) {
            return refuse(self, Status::from(&e));
        }
        if s.len_bytes as usize > buffer.len() {
            return refuse(self, Status::BadLength);
        }
        if self.free_ids.is_empty() && self.in_flight.len() >= IN_FLIGHT_MAX {
            return refuse(self, Status::BadLength);
        }
        let op = match s.op {
            Opcode::Read if s.len_bytes <= COPY_WHEN_DONE_MAX_BYTES => {
                self.backing.prefetch(s.offset_bytes, s.len_bytes as usize);
                Op::Read
            }
            Opcode::Read => {
                let data = &mut buffer[..s.len_bytes as usize];
                if self.backing.read(s.offset_bytes, data).is_err() {
                    return refuse(self, Status::IoError);
                }
                Op::Read
            }
            Opcode::Write => {
                // Taking the data at submission makes an acknowledged write durable in the
                // backing no matter when the process dies afterwards.
                let data = &buffer[..s.len_bytes as usize];
                if self.backing.write(s.offset_bytes, data).is_err() {
                    return refuse(self, Status::IoError);
                }
                Op::Write
            }
            Opcode::Flush => unreachable!("handled above"),
        };
        let id = match self.free_ids.pop() {
            Some(id) => id,
            None => {
                self.in_flight.push(None);
                (self.in_flight.len() - 1) as u32
            }
        };
        self.in_flight[id as usize] = Some(InFlight {
            submission: s,
            submit_ns: now_ns,
            copy_when_done: s.op == Opcode::Read && s.len_bytes <= COPY_WHEN_DONE_MAX_BYTES,
            status: Status::Ok,
        });
        let cmd = Command {
            id: u64::from(id),
            op,
            offset_bytes: s.offset_bytes,
            len_bytes: s.len_bytes,
        };
        self.model.submit(cmd, now_ns).expect("checked above");
    }

    /// `advance`, then `post_due`: everything due by `now_ns` (a clock reading).
    #[cfg(test)]
    pub fn poll<'b>(
        &mut self,
        now_ns: u64,
        buffer: impl FnMut(u16, Tag) -> &'b mut [u8],
        post: impl FnMut(Posted),
    ) {
        self.advance(now_ns, buffer);
        self.post_due(now_ns, post);
    }

    /// Runs the model up to `now_ns` (a clock reading): it finishes the commands due by then,
    /// copies the small reads among them into their buffers (`buffer(queue, tag)` gives a
    /// command's DMA buffer) and queues their completions for `post_due`. Call it before
    /// `submit` at the same `now_ns`: a command arriving then finds the device as it is then.
    /// Returns whether the model had anything due (work was done).
    pub fn advance<'b>(
        &mut self,
        now_ns: u64,
        mut buffer: impl FnMut(u16, Tag) -> &'b mut [u8],
    ) -> bool {
        let due = self.model.next_event_ns().is_some_and(|t| t <= now_ns);
        if due {
            let (due, sum, count, in_flight, backing) = (
                &mut self.due,
                &mut self.modelled_sum,
                &mut self.modelled_count,
                &mut self.in_flight,
                &self.backing,
            );
            self.model.advance(now_ns, |c| {
                sum.add(&c.breakdown);
                *count += 1;
                let f = in_flight[c.id as usize]
                    .as_mut()
                    .expect("the model finishes only commands in flight");
                if f.copy_when_done {
                    f.copy_when_done = false;
                    let s = f.submission;
                    let buf = &mut buffer(s.queue, s.tag)[..s.len_bytes as usize];
                    if backing.read(s.offset_bytes, buf).is_err() {
                        f.status = Status::IoError;
                    }
                }
                due.push(Reverse((c.visible_ns, c.id as u32)))
            });
        }
        due
    }

    /// Posts every completion whose deadline has passed by `now_ns` (a clock reading), in
    /// deadline order, after its data is in place, and the refusals since the last call. Each
    /// completion's posting time is read afresh, so the lateness recorded is the true one.
    /// Returns how many it posted.
    pub fn post_due(&mut self, now_ns: u64, mut post: impl FnMut(Posted)) -> usize {
        let mut posted_count = self.immediate.len();
        for p in self.immediate.drain(..) {
            post(p);
        }
        while let Some(&Reverse((deadline, id))) = self.due.peek() {
            if deadline > now_ns {
                break;
            }
            self.due.pop();
            let f = self.in_flight[id as usize]
                .take()
                .expect("one completion per command");
            self.free_ids.push(id);
            let s = f.submission;
            let posted = self.clock.now_ns();
            assert!(posted >= deadline, "completion posted before its deadline");
            self.lateness
                .record(deadline, posted, deadline - f.submit_ns);
            post(Posted {
                queue: s.queue,
                tag: s.tag,
                status: f.status,
                deadline_ns: deadline,
                posted_ns: posted,
            });
            posted_count += 1;
        }
        posted_count
    }

    /// The deadline of the earliest completion the model has produced, if any (a poller may
    /// spin until it instead of polling blindly).
    pub fn next_deadline_ns(&self) -> Option<u64> {
        let model_next = self.model.next_event_ns();
        let due_next = self.due.peek().map(|Reverse((t, _))| *t);
        match (model_next, due_next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The model's breakdown summed over every command it completed, and how many: where the
    /// modelled device spent its time.
    pub fn modelled(&self) -> (&Breakdown, u64) {
        (&self.modelled_sum, self.modelled_count)
    }

    pub fn backing_pages(&self) -> BackingPages {
        self.backing.pages()
    }

    /// Commands accepted and not yet posted.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len() - self.free_ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvarray_model::presets::preset;
    use proptest::prelude::*;

    fn core(overrides: &[(&str, &str)]) -> DeviceCore {
        let mut ov: Vec<(String, String)> = vec![("memory.capacity_bytes".into(), "16m".into())];
        ov.extend(
            overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let cfg = preset("dram").unwrap().load(&ov).unwrap();
        DeviceCore::open(&cfg, &BackingKind::Ram).unwrap()
    }

    /// Runs one command to completion; returns its completion.
    fn run(c: &mut DeviceCore, s: Submission, buf: &mut [u8]) -> Posted {
        c.submit(s, buf, c.clock().now_ns());
        let mut done = None;
        for _ in 0..10_000_000 {
            let now_ns = match c.next_deadline_ns() {
                Some(t) => c.clock().spin_until(t),
                None => c.clock().now_ns(),
            };
            let raw = buf as *mut [u8];
            // SAFETY: `buf` is not used while `poll` runs; the slice is the one buffer of the
            // one command in flight, handed to the device as a DMA buffer would be.
            c.poll(now_ns, |_, _| unsafe { &mut *raw }, |p| done = Some(p));
            if let Some(p) = done {
                return p;
            }
        }
        panic!("command never completed");
    }

    fn sub(op: Opcode, offset_bytes: u64, len_bytes: u32) -> Submission {
        Submission {
            queue: 0,
            tag: Tag::new(1),
            op,
            offset_bytes,
            len_bytes,
        }
    }

    #[test]
    fn completions_are_never_early_and_carry_the_data() {
        let mut c = core(&[]);
        let mut buf = vec![0u8; 8192];
        buf[..4096].fill(0xab);
        let w = run(&mut c, sub(Opcode::Write, 8192, 4096), &mut buf);
        assert_eq!(w.status, Status::Ok);
        assert!(w.posted_ns >= w.deadline_ns);
        buf.fill(0);
        let r = run(&mut c, sub(Opcode::Read, 8192, 4096), &mut buf);
        assert_eq!(r.status, Status::Ok);
        assert!(r.posted_ns >= r.deadline_ns);
        assert!(buf[..4096].iter().all(|&b| b == 0xab));
        assert_eq!(c.lateness().count(), 2);
        assert_eq!(c.lateness().early(), 0);
    }

    #[test]
    fn bad_commands_fail_and_touch_nothing() {
        let mut c = core(&[]);
        let mut buf = vec![0x5au8; 8192];
        let size = 16u64 << 20;
        for (s, status) in [
            (sub(Opcode::Write, size, 512), Status::OutOfRange),
            (sub(Opcode::Write, size - 512, 1024), Status::OutOfRange),
            (sub(Opcode::Write, 1, 512), Status::Misaligned),
            (sub(Opcode::Write, 0, 100), Status::Misaligned),
            (sub(Opcode::Write, 0, 0), Status::BadLength),
            (sub(Opcode::Write, 0, 16384), Status::BadLength),
        ] {
            assert_eq!(run(&mut c, s, &mut buf).status, status, "{s:?}");
        }
        let mut check = vec![0xffu8; 8192];
        assert_eq!(
            run(&mut c, sub(Opcode::Read, 0, 8192), &mut check).status,
            Status::Ok
        );
        assert!(
            check.iter().all(|&b| b == 0),
            "a refused write changed the data"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
        /// Random writes and reads return what a plain byte array says. Lengths span both
        /// read paths: copied when done (≤ 4 KB) and copied at submission (up to 8 KB).
        #[test]
        fn matches_a_reference_array(ops in proptest::collection::vec((any::<bool>(), 0u64..64, 1u32..=16, any::<u8>()), 1..40)) {
            let mut c = core(&[]);
            let mut reference = vec![0u8; 64 * 512 + 16 * 512];
            let mut buf = vec![0u8; 16 * 512];
            for (write, block, blocks, fill) in ops {
                let (offset, len) = (block * 512, blocks * 512);
                if write {
                    buf[..len as usize].fill(fill);
                    prop_assert_eq!(run(&mut c, sub(Opcode::Write, offset, len), &mut buf).status, Status::Ok);
                    reference[offset as usize..(offset + u64::from(len)) as usize].fill(fill);
                } else {
                    prop_assert_eq!(run(&mut c, sub(Opcode::Read, offset, len), &mut buf).status, Status::Ok);
                    prop_assert_eq!(&buf[..len as usize], &reference[offset as usize..(offset + u64::from(len)) as usize]);
                }
            }
        }
    }
}
