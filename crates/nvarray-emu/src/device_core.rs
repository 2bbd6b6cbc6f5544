//! The serial part of the device: one timing model, dated by the wall clock.
//!
//! Everything else a command needs — taking it from its queue, validating it, moving its data,
//! posting its completion at its deadline — is done by the thread that serves its queue pair
//! (`queue_work`), in parallel with the other pairs. `DeviceCore` is what they share: the
//! `nvarray_model::DeviceModel` (one device, so one model) and which command each of its ids
//! stands for. The engine keeps it behind one lock and each visit is short: hand over the
//! commands taken, advance the model to the clock, hand out what it finished.

use nvarray_model::{Breakdown, Command, CommandError, DeviceConfig, DeviceModel, Op};

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
    /// A write's placement handle (NVMe FDP's DSPEC with DTYPE 2h; 0 without one), checked
    /// against `ftl.placement_handles` when decoded.
    pub placement: u16,
    /// Its doorbell (`DmaMemory::doorbell_ns`), 0 when the host did not stamp it: the model
    /// takes it at this time, or at its visit's clock reading without one.
    pub doorbell_ns: u64,
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

/// A command the model has finished: its completion is due at `deadline_ns`. Where its data
/// is (for a read copied when done) its pair kept when it claimed the tag
/// (`queue_work::TagStates`): what crosses the model's lock is only what the model returns.
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    pub queue: u16,
    pub tag: Tag,
    pub op: Opcode,
    pub len_bytes: u32,
    /// When it was handed to the model, and the model's deadline for its completion.
    pub submit_ns: u64,
    pub deadline_ns: u64,
}

/// The model's cookie for a command: its queue pair and tag. A tag is held by one command at
/// a time across the device (`TagStates::claim`), so the pair is unique among those in flight
/// and the model's completion says where it goes without a table of its own.
fn cookie(queue: u16, tag: Tag) -> u64 {
    (u64::from(queue) << 16) | u64::from(tag.raw())
}

fn from_cookie(id: u64) -> (u16, Tag) {
    ((id >> 16) as u16, Tag::new(id as u16))
}

pub struct DeviceCore {
    model: DeviceModel,
    /// Sum of the model's breakdowns of every completed command, and their number.
    modelled_sum: Breakdown,
    modelled_count: u64,
    /// Deallocates and flushes, done without the model's pipeline: handed out by the first
    /// `advance` at or after their deadline (a deallocate's is its submission; a flush's is
    /// when the write buffer has drained). They have no breakdown.
    done_at_once: Vec<Finished>,
    /// Whether the model's refusal of writes past the map budget has been logged (once).
    map_budget_logged: bool,
}

impl DeviceCore {
    pub fn new(config: &DeviceConfig) -> Self {
        DeviceCore {
            model: DeviceModel::new(config),
            modelled_sum: Breakdown::default(),
            modelled_count: 0,
            done_at_once: Vec::new(),
            map_budget_logged: false,
        }
    }

    /// Runs up to `pages` of the model's untimed work (`DeviceModel::run_deferred`).
    pub fn run_deferred(&mut self, pages: u32) -> bool {
        self.model.run_deferred(pages)
    }

    /// The timing model (for its utilisation and wear figures).
    pub fn model(&self) -> &DeviceModel {
        &self.model
    }

    /// Hands the model a command taken from a queue before `now_ns` (a clock reading taken
    /// after the command was in its queue, and after `advance(now_ns, ..)`, so the model has
    /// done everything due before the command arrived). The command was validated against
    /// the geometry (`nvarray_model::check_command`) and its data moved by its queue's owner;
    /// the model refuses nothing valid, so an error here is the caller's bug, reported as a
    /// status rather than a panic. A deallocate is done here, at once, and finishes at
    /// `now_ns` (`DeviceModel::deallocate`); a flush reaches the model only on flash with a
    /// write buffer (`queue_work::accept`) and finishes when the buffer has drained.
    pub fn submit(&mut self, s: Submission, now_ns: u64) -> Result<(), Status> {
        let op = match s.op {
            Opcode::Read => Op::Read,
            // An append is a write at the block its zone gave it (`queue_work::zone_command`).
            Opcode::Write | Opcode::ZoneAppend => Op::Write,
            // Zone state changes only: a zone of a flash preset is erased at the rate its
            // writes are charged (`memory.erase_block_bytes`), so a reset books nothing more.
            Opcode::ZoneManage { .. } | Opcode::ZoneReport { .. } => {
                self.finish_at(s, now_ns, now_ns);
                return Ok(());
            }
            Opcode::Flush => {
                let done_ns = self.model.drained_ns(now_ns);
                self.finish_at(s, now_ns, done_ns);
                return Ok(());
            }
            Opcode::Deallocate => {
                nvarray_model::check_command(self.model.config(), s.offset_bytes, s.len_bytes)
                    .map_err(|e| Status::from(&e))?;
                self.model.deallocate(s.offset_bytes, s.len_bytes);
                self.finish_at(s, now_ns, now_ns);
                return Ok(());
            }
        };
        let cmd = Command {
            id: cookie(s.queue, s.tag),
            op,
            offset_bytes: s.offset_bytes,
            len_bytes: s.len_bytes,
            placement: s.placement,
        };
        self.model.submit(cmd, now_ns).map_err(|e| {
            if let CommandError::MapBudget(why) = &e {
                if !self.map_budget_logged {
                    self.map_budget_logged = true;
                    eprintln!("nvarray: {why}; the device refuses writes from now on");
                }
            }
            Status::from(&e)
        })
    }

    /// Finishes `s`, a command the model's pipeline does not take, at `deadline_ns`.
    fn finish_at(&mut self, s: Submission, submit_ns: u64, deadline_ns: u64) {
        debug_assert!(
            deadline_ns >= submit_ns,
            "finished at {deadline_ns} ns, before its submission at {submit_ns} ns"
        );
        self.done_at_once.push(Finished {
            queue: s.queue,
            tag: s.tag,
            op: s.op,
            len_bytes: s.len_bytes,
            submit_ns,
            deadline_ns,
        });
    }

    /// Runs the model up to `now_ns` (a clock reading) and hands `finished` each command it
    /// finished, in the order it finished them. Returns whether anything was due.
    pub fn advance(&mut self, now_ns: u64, mut finished: impl FnMut(Finished)) -> bool {
        let before = self.done_at_once.len();
        self.done_at_once.retain(|f| {
            let due = f.deadline_ns <= now_ns;
            if due {
                finished(*f);
            }
            !due
        });
        let at_once = self.done_at_once.len() < before;
        if self.model.next_event_ns().is_none_or(|t| t > now_ns) {
            return at_once;
        }
        let (sum, count) = (&mut self.modelled_sum, &mut self.modelled_count);
        self.model.advance(now_ns, |c| {
            sum.add(&c.breakdown);
            *count += 1;
            let (queue, tag) = from_cookie(c.id);
            finished(Finished {
                queue,
                tag,
                op: match c.op {
                    Op::Read => Opcode::Read,
                    Op::Write => Opcode::Write,
                },
                len_bytes: c.len_bytes,
                submit_ns: c.submit_ns,
                deadline_ns: c.visible_ns,
            });
        });
        true
    }

    /// The model's next event, if it has any: nothing it holds can be due before.
    pub fn next_event_ns(&self) -> Option<u64> {
        let at_once = self.done_at_once.iter().map(|f| f.deadline_ns).min();
        match (at_once, self.model.next_event_ns()) {
            (Some(a), Some(m)) => Some(a.min(m)),
            (a, m) => a.or(m),
        }
    }

    /// The model's breakdown summed over every command it completed, and how many: where the
    /// modelled device spent its time.
    pub fn modelled(&self) -> (&Breakdown, u64) {
        (&self.modelled_sum, self.modelled_count)
    }

    /// Commands in the model, not yet finished.
    pub fn in_flight(&self) -> usize {
        self.model.in_flight() + self.done_at_once.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvarray_model::presets::preset;

    fn core() -> DeviceCore {
        let ov = [("memory.capacity_bytes".to_string(), "16m".to_string())];
        DeviceCore::new(&preset("dram").unwrap().load(&ov).unwrap())
    }

    fn sub(tag: u16, op: Opcode, offset_bytes: u64, len_bytes: u32) -> Submission {
        Submission {
            queue: tag % 2,
            tag: Tag::new(tag),
            op,
            offset_bytes,
            len_bytes,
            placement: 0,
            doorbell_ns: 0,
        }
    }

    /// Runs the model until it has finished everything; returns what it finished.
    fn drain(c: &mut DeviceCore) -> Vec<Finished> {
        let mut done = Vec::new();
        while let Some(t) = c.next_event_ns() {
            c.advance(t, |f| done.push(f));
        }
        done
    }

    #[test]
    fn every_command_finishes_once_after_it_was_submitted() {
        let mut c = core();
        for tag in 0..8u16 {
            let op = if tag % 3 == 0 {
                Opcode::Write
            } else {
                Opcode::Read
            };
            c.submit(sub(tag, op, u64::from(tag) * 4096, 512), 1_000)
                .unwrap();
        }
        assert_eq!(c.in_flight(), 8);
        let done = drain(&mut c);
        assert_eq!(c.in_flight(), 0);
        let mut tags: Vec<u16> = done.iter().map(|f| f.tag.raw()).collect();
        tags.sort_unstable();
        assert_eq!(tags, (0..8).collect::<Vec<_>>());
        for f in &done {
            assert_eq!(f.submit_ns, 1_000);
            assert!(f.deadline_ns > f.submit_ns, "{f:?}");
            assert_eq!(f.queue, f.tag.raw() % 2, "{f:?}");
            let op = if f.tag.raw() % 3 == 0 {
                Opcode::Write
            } else {
                Opcode::Read
            };
            assert_eq!((f.op, f.len_bytes), (op, 512), "{f:?}");
        }
        assert_eq!(c.modelled().1, 8);
    }

    /// The cookie carries any queue id and tag there can be, and nothing else.
    #[test]
    fn the_cookie_gives_back_the_queue_and_tag() {
        for (queue, tag) in [(0u16, 0u16), (1, 2), (u16::MAX, u16::MAX), (7, 0), (0, 9)] {
            assert_eq!(
                from_cookie(cookie(queue, Tag::new(tag))),
                (queue, Tag::new(tag))
            );
        }
    }

    /// TLC flash behind an FTL, with a DRAM write buffer of `buffer` bytes (0: none).
    fn flash_core(buffer: u64) -> DeviceCore {
        let ov: Vec<(String, String)> = [
            ("memory.capacity_bytes", "256m".to_string()),
            ("memory.erase_block_bytes", "16k".to_string()),
            ("ftl.enabled", "true".to_string()),
            ("ftl.write_buffer_bytes", buffer.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        DeviceCore::new(&preset("tlc").unwrap().load(&ov).unwrap())
    }

    #[test]
    fn writes_past_the_ftl_map_budget_are_refused_and_reads_still_served() {
        // A 1 TiB drive whose maps may take a few KiB more than its directories: scattered
        // 4 KiB writes outgrow that within a few hundred.
        let load = |budget: &str| {
            let ov: Vec<(String, String)> = [
                ("memory.capacity_bytes", "1t"),
                ("ftl.enabled", "true"),
                ("ftl.map_budget_bytes", budget),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            preset("tlc").unwrap().load(&ov).unwrap()
        };
        let base = DeviceModel::new(&load("8g"))
            .ftl_stats()
            .unwrap()
            .host_map_bytes;
        let mut c = DeviceCore::new(&load(&(base + 8192).to_string()));
        let (mut refused, mut now) = (None, 0);
        for k in 0..4096u64 {
            let offset = k.wrapping_mul(0x9E37_79B9) % (1 << 28) * 4096;
            if let Err(status) = c.submit(sub(0, Opcode::Write, offset, 4096), now) {
                refused = Some((k, status));
                break;
            }
            now = drain(&mut c)
                .iter()
                .map(|f| f.deadline_ns)
                .max()
                .unwrap_or(now);
        }
        let (k, status) = refused.expect("writes past the budget are refused");
        assert!(k > 0, "the first write fits");
        assert_eq!(status, Status::IoError);
        c.submit(sub(0, Opcode::Read, 0, 4096), now).unwrap();
        assert!(c
            .model()
            .check_ftl_map_budget()
            .unwrap_err()
            .contains("ftl.map_budget_bytes"));
    }

    /// The TLC preset's program time (2.5 ms), which a write buffer hides from writes and a
    /// flush waits for.
    const TLC_PROGRAM_NS: u64 = 2_500_000;

    #[test]
    fn a_write_buffer_acknowledges_writes_at_once_and_a_flush_waits_for_their_programs() {
        for buffer in [0u64, 64 << 10] {
            let mut c = flash_core(buffer);
            for tag in 0..4u16 {
                c.submit(sub(tag, Opcode::Write, u64::from(tag) * 4096, 4096), 0)
                    .unwrap();
            }
            let writes = drain(&mut c);
            let last = writes.iter().map(|f| f.deadline_ns).max().unwrap();
            assert_eq!(writes.len(), 4);
            c.submit(sub(9, Opcode::Flush, 0, 0), last).unwrap();
            assert_eq!(
                c.in_flight(),
                1,
                "the flush is in flight until the buffer drains"
            );
            let flush = drain(&mut c);
            assert_eq!((flush.len(), flush[0].op), (1, Opcode::Flush));
            let flush_ns = flush[0].deadline_ns - last;
            if buffer == 0 {
                assert!(
                    last >= TLC_PROGRAM_NS,
                    "unbuffered writes wait for the program"
                );
                assert_eq!(flush_ns, 0, "nothing to drain");
            } else {
                assert!(
                    last < TLC_PROGRAM_NS / 10,
                    "buffered writes done at {last} ns"
                );
                assert!(
                    last + flush_ns >= TLC_PROGRAM_NS,
                    "the flush ends when the programs do: {flush_ns} ns after {last}"
                );
            }
        }
    }

    #[test]
    fn what_the_model_refuses_leaves_nothing_in_flight() {
        let mut c = core();
        assert_eq!(
            c.submit(sub(1, Opcode::Read, 16 << 20, 512), 0),
            Err(Status::OutOfRange)
        );
        assert_eq!(
            c.submit(sub(1, Opcode::Deallocate, 16 << 20, 512), 0),
            Err(Status::OutOfRange)
        );
        assert_eq!(c.in_flight(), 0);
        assert!(!c.advance(u64::MAX / 2, |_| panic!("nothing was submitted")));
    }
}
