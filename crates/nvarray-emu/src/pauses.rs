//! When the machine did not run a serving thread: the pauses that make a completion late
//! through no fault of the emulator's.
//!
//! A thread that serves the device reads the clock all through its loop. Two consecutive
//! readings farther apart than any work the loop does between them (`PAUSE_NS`, plus what the
//! work it declared may take, `PauseWatch::allow`) mean the thread was not running in
//! between: an interrupt, the scheduler or the hypervisor had its CPU. A completion whose
//! deadline fell inside such a gap is *machine-late*: the thread would have posted it on time
//! had it been running; so is one that fell due while the thread, back, was still posting
//! those (`PauseWatch::catching_up`). Every other late completion is the emulator's own
//! (`Lateness`).
//!
//! The test is conservative on purpose: a gap counts only past an allowance well above the
//! loop's real work, so the emulator's own slowness is never excused as the machine's; a short
//! pause inside long declared work goes unnoticed and counts as the emulator's. A pause of
//! another thread (one holding the model's lock) counts as the emulator's too: the chain of
//! readings is broken across a wait for a lock (`PauseWatch::restart`).
//!
//! The readings are those the loop makes anyway (no extra clock reads on the fast path); the
//! watch lives in a thread-local, since a pause is a thread's, whatever queue pair it serves.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A gap between two consecutive readings of a serving loop longer than this, plus the work
/// declared between them, is a pause of the machine. A pass of the loop does at most a few
/// hundred nanoseconds of undeclared work between readings (a pass over an idle pair is about
/// 100 ns; posting a completion about 200); on the VMs of docs/perf.md the machine's pauses
/// are 5 to 900 µs (issue 37).
pub const PAUSE_NS: u64 = 2_000;

/// Work allowed per command taken or handed to the model, over `PAUSE_NS`: about four times the
/// serial part per command (the model's lock held, 258 ns for moneta's 4 KiB random reads at
/// QD 16 on the project's VM) and more than the model's whole cost per command (about 2,600
/// instructions, 0.8 µs; issue 38), so a batch is not mistaken for a pause. At 2 µs the
/// emulator's own p99 at that QD 16 rose from 1.5 to 1.9 µs (a pause inside a batch's
/// allowance counted as its own; docs/perf.md, issue 37).
pub const ALLOW_NS_PER_COMMAND: u64 = 1_000;

/// Work allowed per KiB of data a command moves (copy or prefetch): 4 GiB/s, a quarter of the
/// memcpy bandwidth measured on the project's VMs.
pub const ALLOW_NS_PER_KIB: u64 = 250;

/// Work allowed per page whose map entry a flash collector moved (`DeviceModel::map_moves`):
/// about three times its cost (30 ns with the map entry a cache miss; 27 ns measured per page
/// of a whole-line copy, next slot and counts included). A visit in which the collector copied
/// a line of 10,000 pages at once is the emulator's work for 1 ms, not a pause of the machine.
pub const ALLOW_NS_PER_MAP_MOVE: u64 = 100;

/// Why a thread was not running when a deadline fell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// The machine paused it between two readings of its loop.
    Paused,
    /// It slept and the kernel woke it later than the margin it had chosen
    /// (`device_sleep`): wake-late.
    WokeLate,
}

/// Pauses remembered: a completion's deadline is looked up among the latest few, since the
/// thread posts it at the first reading after the pause that held it. At 4, a burst of
/// completions each held up by a pause (a flash write buffer draining at QD 32, every post
/// waking the sleeping host) pushed the first ones' pauses out before they were posted, and
/// their lateness counted as the emulator's own (issue 56: own p99 96 µs, 31-42 µs at 16).
const RECENT: usize = 16;

/// One thread's chain of clock readings and the pauses found in it.
#[derive(Debug)]
pub struct PauseWatch {
    /// The chain's last reading (`None`: no chain; the next reading starts one).
    last_ns: Option<u64>,
    /// Work declared since the last reading.
    allowed_ns: u64,
    /// The latest pauses as (last reading before, first reading after, why), newest at
    /// `next - 1` (a ring).
    recent: [(u64, u64, Held); RECENT],
    /// Per remembered window, how long the thread is known not to have run in it: a gap in the
    /// chain less the work allowed in it, a sleep's or a holder's whole window.
    stopped_ns: [u64; RECENT],
    next: usize,
    /// The latest end of a remembered pause: a deadline at or after it fell in none (the
    /// common case, and one comparison instead of a look through `recent`).
    latest_end_ns: u64,
    /// The thread's last sleep (`woke`), for the commands rung during it (`taken`).
    slept: Slept,
    /// The latest stretch of the host's own code between two inline polls (`host_code`): from
    /// the previous pass's last reading to the next pass's first.
    host_window: (u64, u64),
    /// The device whose lock holders' pauses this thread took in last (its `HolderPauses`'
    /// address) and how many of them (`HolderPauses::import`).
    imported: (usize, u64),
}

/// A sleep, and from when a late wake-up from it is already marked (`u64::MAX`: not yet).
#[derive(Clone, Copy, Debug)]
struct Slept {
    asleep_ns: u64,
    woke_ns: u64,
    margin_ns: u64,
    marked_from_ns: u64,
}

impl Default for PauseWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl PauseWatch {
    pub const fn new() -> Self {
        PauseWatch {
            last_ns: None,
            allowed_ns: 0,
            recent: [(0, 0, Held::Paused); RECENT],
            stopped_ns: [0; RECENT],
            next: 0,
            latest_end_ns: 0,
            slept: Slept {
                asleep_ns: 0,
                woke_ns: 0,
                margin_ns: 0,
                marked_from_ns: u64::MAX,
            },
            host_window: (0, 0),
            imported: (0, 0),
        }
    }

    /// A reading of the clock in the loop. A gap since the previous one longer than
    /// `PAUSE_NS` plus the work declared in between is remembered as a pause.
    #[inline]
    pub fn reading(&mut self, now_ns: u64) {
        if let Some(last) = self.last_ns {
            if now_ns > last && now_ns - last > PAUSE_NS + self.allowed_ns {
                let stopped = now_ns - last - self.allowed_ns;
                self.remember(last, now_ns, Held::Paused, stopped);
            }
        }
        self.last_ns = Some(now_ns);
        self.allowed_ns = 0;
    }

    /// A reading after the thread did something else, unbounded (slept, yielded, waited for a
    /// lock, ran the host's own code): no gap is measured across it, a new chain starts.
    #[inline]
    pub fn restart(&mut self, now_ns: u64) {
        self.last_ns = Some(now_ns);
        self.allowed_ns = 0;
    }

    /// The first reading of an inline pass after the host thread ran its own code since its
    /// previous pass: a new chain, and a deadline that fell in between (after the previous
    /// pass's last reading) is one the host could not have seen before this pass on any
    /// device, since it was not looking: its lateness counts from `now_ns` (`seen_from`).
    /// The host's code, and any pause of the machine inside it, is the host's time, which its
    /// own latencies show (issue 56: such deadlines counted as the emulator's own lateness
    /// from the deadline, so an NBD server's `send` and `recv` made it NOT FAITHFUL).
    #[inline]
    pub fn host_code(&mut self, now_ns: u64) {
        if let Some(last) = self.last_ns {
            self.host_window = (last, now_ns);
        }
        self.restart(now_ns);
    }

    /// When the host could first have seen a completion due at `deadline_ns`: the end of the
    /// latest stretch of its own code (`host_code`) if the deadline fell inside it, else the
    /// deadline itself.
    #[inline]
    pub fn seen_from(&self, deadline_ns: u64) -> u64 {
        let (from, to) = self.host_window;
        if from < deadline_ns && deadline_ns < to {
            to
        } else {
            deadline_ns
        }
    }

    /// The chain is broken and the next reading starts a new one.
    #[inline]
    pub fn break_chain(&mut self) {
        self.last_ns = None;
    }

    /// A pause known otherwise: a sleep meant to end at `from_ns` that the kernel ended at
    /// `to_ns`. Starts a new chain at `to_ns`.
    pub fn overslept(&mut self, from_ns: u64, to_ns: u64) {
        if to_ns > from_ns + PAUSE_NS {
            self.remember(from_ns, to_ns, Held::Paused, to_ns - from_ns);
        }
        self.restart(to_ns);
    }

    /// A sleep from `asleep_ns` to `woke_ns` that should have ended by `expected_ns` (the
    /// time the thread had to act; `None`: only a doorbell could end it): what fell due after
    /// that is wake-late. A command rung while it slept is looked at when taken
    /// (`taken`), against `margin_ns`, the wake-up the thread allowed for. Starts a new
    /// chain at `woke_ns`.
    pub fn woke(&mut self, asleep_ns: u64, expected_ns: Option<u64>, woke_ns: u64, margin_ns: u64) {
        if let Some(expected) = expected_ns {
            self.woke_late_after(expected, woke_ns);
        }
        self.slept = Slept {
            asleep_ns,
            woke_ns,
            margin_ns,
            marked_from_ns: expected_ns.unwrap_or(u64::MAX),
        };
        self.restart(woke_ns);
    }

    /// A command rung at `doorbell_ns` is being taken: if the thread was asleep then and woke
    /// more than its margin after the ring, what fell due from the ring plus the margin to
    /// the wake-up is wake-late (the doorbell woke it; the kernel ran it late).
    #[inline]
    pub fn taken(&mut self, doorbell_ns: u64) {
        let s = self.slept;
        if doorbell_ns >= s.asleep_ns && doorbell_ns < s.woke_ns {
            let expected = doorbell_ns + s.margin_ns;
            // The earliest ring of a sleep marks the widest window: later ones add nothing.
            if expected < s.woke_ns && expected < s.marked_from_ns {
                self.woke_late_after(expected, s.woke_ns);
                self.slept.marked_from_ns = expected;
            }
        }
    }

    fn woke_late_after(&mut self, expected_ns: u64, woke_ns: u64) {
        if woke_ns > expected_ns {
            // A deadline at the expected time itself is held too: the thread had to be back
            // by then, and was not (`held_at` holds those strictly after the window's start).
            let from = expected_ns.saturating_sub(1);
            self.remember(from, woke_ns, Held::WokeLate, woke_ns - from);
        }
    }

    /// A completion due at `deadline_ns`, held by a remembered pause or late wake-up, was
    /// posted at `posted_ns`: the thread is catching up on what fell due while it was not
    /// running, so what falls due until then is held by the same pause (had the thread been
    /// running, it would have posted those before and been free). The window is extended to
    /// `posted_ns`; the catch-up ends at the first post that finds nothing held. Issue 56:
    /// catch-up posts after a long pause counted as the emulator's own lateness.
    pub fn catching_up(&mut self, deadline_ns: u64, posted_ns: u64) {
        let kept = self.next.min(RECENT);
        if let Some(window) = self
            .recent
            .iter_mut()
            .take(kept)
            .find(|&&mut (from, to, _)| from < deadline_ns && deadline_ns < to)
        {
            window.1 = window.1.max(posted_ns);
            self.latest_end_ns = self.latest_end_ns.max(posted_ns);
        }
    }

    fn remember(&mut self, from_ns: u64, to_ns: u64, held: Held, stopped_ns: u64) {
        // `held_at` looks for deadlines strictly inside the window; `paused_within` takes the
        // time stopped as at most the window.
        debug_assert!(from_ns < to_ns, "empty pause window {from_ns}..{to_ns}");
        debug_assert!(
            stopped_ns <= to_ns - from_ns,
            "stopped {stopped_ns} ns in a window of {} ns",
            to_ns - from_ns
        );
        self.recent[self.next % RECENT] = (from_ns, to_ns, held);
        self.stopped_ns[self.next % RECENT] = stopped_ns;
        self.next = self.next.wrapping_add(1);
        self.latest_end_ns = self.latest_end_ns.max(to_ns);
    }

    /// Declares work before the next reading: `commands` taken or handed over, `bytes` moved.
    #[inline]
    pub fn allow(&mut self, commands: u64, bytes: u64) {
        self.allowed_ns += allowance_ns(commands, bytes);
    }

    /// Declares work the thread did since its last reading that `allow`'s units do not
    /// measure, as the time it may take (`ALLOW_NS_PER_MAP_MOVE`).
    #[inline]
    pub fn allow_ns(&mut self, ns: u64) {
        self.allowed_ns += ns;
    }

    /// Whether `deadline_ns` fell inside a remembered pause or late wake-up, and which: after
    /// the last reading before it (so the thread had not yet seen it due) and before the
    /// first one after.
    #[inline]
    pub fn held_at(&self, deadline_ns: u64) -> Option<Held> {
        if deadline_ns >= self.latest_end_ns {
            return None;
        }
        self.recent
            .iter()
            .take(self.next.min(RECENT))
            .find(|&&(from, to, _)| from < deadline_ns && deadline_ns < to)
            .map(|&(_, _, held)| held)
    }

    /// How long the remembered pauses and late wake-ups kept the thread from running between
    /// `from_ns` and `to_ns`: each one's overlap with that span, at most the time it is known
    /// to have stopped the thread (a gap less the work allowed in it), and at most the span.
    /// For a completion the thread was paused after it fell due and before it posted it.
    #[inline]
    pub fn paused_within(&self, from_ns: u64, to_ns: u64) -> u64 {
        if self.latest_end_ns <= from_ns || to_ns <= from_ns {
            return 0;
        }
        let overlap: u64 = self
            .recent
            .iter()
            .zip(&self.stopped_ns)
            .take(self.next.min(RECENT))
            .map(|(&(from, to, _), &stopped)| {
                (to.min(to_ns).saturating_sub(from.max(from_ns))).min(stopped)
            })
            .sum();
        overlap.min(to_ns - from_ns)
    }

    /// Whether `deadline_ns` fell inside a remembered pause or late wake-up (`held_at`).
    #[inline]
    pub fn paused_at(&self, deadline_ns: u64) -> bool {
        self.held_at(deadline_ns).is_some()
    }
}

/// The time work on `commands` commands moving `bytes` bytes may take (`ALLOW_NS_PER_COMMAND`,
/// `ALLOW_NS_PER_KIB`).
#[inline]
pub fn allowance_ns(commands: u64, bytes: u64) -> u64 {
    commands * ALLOW_NS_PER_COMMAND + bytes * ALLOW_NS_PER_KIB / 1024
}

/// Holders' pauses kept for the threads that have not taken them in yet: a thread serving its
/// pairs takes them in at its next post, a few microseconds later, so more than a few in
/// between are an edge (and those missed count as the emulator's, the conservative side).
const HOLDER_RECENT: usize = 8;

/// The latest pauses of threads while they held the model's lock, for the other threads
/// serving the device: what fell due for their pairs meanwhile could not be settled until the
/// holder ran again, so it is the machine's, not the emulator's (issue 56: the waiting threads
/// restarted their chains and counted it as their own).
#[derive(Debug, Default)]
pub struct HolderPauses {
    /// Pauses published so far.
    published: AtomicU64,
    /// The latest ones' windows (the visit each fell in, from its first reading to its last),
    /// pause `n` at `n % HOLDER_RECENT`, and for each the process-wide number it was given.
    windows: Mutex<[(u64, u64); HOLDER_RECENT]>,
}

impl HolderPauses {
    /// The holder of the model's lock visited from `from_ns` to `to_ns`, longer than its work
    /// and `PAUSE_NS` allow: it was not running for part of that.
    pub fn publish(&self, from_ns: u64, to_ns: u64) {
        // `import` takes the whole window as the time the holder stopped.
        debug_assert!(from_ns < to_ns, "empty holder window {from_ns}..{to_ns}");
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.published.load(Ordering::Relaxed);
        windows[n as usize % HOLDER_RECENT] = (from_ns, to_ns);
        // Release: a thread that sees the count sees the window.
        self.published.store(n + 1, Ordering::Release);
    }

    /// Takes the pauses published since `w` last looked into it: one load when there is none.
    #[inline]
    pub fn import(&self, w: &mut PauseWatch) {
        let published = self.published.load(Ordering::Acquire);
        let key = self as *const HolderPauses as usize;
        if w.imported == (key, published) {
            return;
        }
        // A watch last fed by another device (a thread serving two in turn) starts afresh.
        let seen = if w.imported.0 == key { w.imported.1 } else { 0 };
        let from = seen.max(published.saturating_sub(HOLDER_RECENT as u64));
        let windows = *self.windows.lock().unwrap_or_else(|e| e.into_inner());
        for n in from..published {
            let (from_ns, to_ns) = windows[n as usize % HOLDER_RECENT];
            w.remember(from_ns, to_ns, Held::Paused, to_ns - from_ns);
        }
        w.imported = (key, published);
    }
}

thread_local! {
    static WATCH: RefCell<PauseWatch> = const { RefCell::new(PauseWatch::new()) };
}

/// Runs `f` on the calling thread's watch.
#[inline]
pub fn this_thread<R>(f: impl FnOnce(&mut PauseWatch) -> R) -> R {
    WATCH.with_borrow_mut(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_past_the_allowance_is_a_pause_and_holds_the_deadlines_inside_it() {
        let mut w = PauseWatch::new();
        w.reading(1_000);
        w.reading(1_100); // a pass
        assert!(!w.paused_at(1_050), "100 ns is the loop's own time");
        w.reading(1_100 + PAUSE_NS); // exactly the floor: not a pause
        assert!(!w.paused_at(1_200));
        w.reading(50_000); // 46.9 µs: a pause
        assert!(w.paused_at(40_000));
        assert!(
            !w.paused_at(1_100 + PAUSE_NS),
            "due at the reading before: the thread saw it due and was running"
        );
        assert!(!w.paused_at(50_000), "due at the reading after: on time");
        assert!(!w.paused_at(60_000));
    }

    #[test]
    fn declared_work_is_not_a_pause_and_a_restart_measures_nothing() {
        let mut w = PauseWatch::new();
        w.reading(0);
        w.allow(16, 16 * 4096); // a batch of 16 4 KiB commands
        let allowed = PAUSE_NS + 16 * ALLOW_NS_PER_COMMAND + 16 * 4 * ALLOW_NS_PER_KIB;
        w.reading(allowed);
        assert!(!w.paused_at(allowed / 2));
        // The allowance was for that gap only.
        w.reading(allowed + PAUSE_NS + 1);
        assert!(w.paused_at(allowed + 1));
        // Across a restart (a sleep, a lock waited for) nothing is measured.
        w.restart(10_000_000);
        w.reading(10_000_100);
        assert!(!w.paused_at(5_000_000));
        w.break_chain();
        w.reading(20_000_000);
        assert!(!w.paused_at(15_000_000));
    }

    /// A deadline that fell while an inline host ran its own code is seen from the host's next
    /// pass; one before the previous pass ended, or after the new one began, from itself.
    #[test]
    fn a_deadline_inside_the_hosts_own_code_is_seen_from_its_next_pass() {
        let mut w = PauseWatch::new();
        // No chain yet: nothing is known of what the thread did before.
        w.host_code(500);
        assert_eq!(w.seen_from(400), 400);
        w.reading(1_000); // the pass ends here
        w.host_code(300_000); // 299 µs of the host's code (a send, a pause inside it)
        assert_eq!(w.seen_from(150_000), 300_000);
        assert_eq!(w.seen_from(1_000), 1_000, "due when the last pass looked");
        assert_eq!(w.seen_from(900), 900);
        assert_eq!(w.seen_from(300_500), 300_500);
        assert!(
            !w.paused_at(150_000),
            "the host's time is not a pause of the machine"
        );
        // The chain goes on from the new pass: a pause inside it is still found.
        w.reading(300_100);
        w.reading(300_100 + PAUSE_NS + 10_000);
        assert!(w.paused_at(305_000));
        assert_eq!(w.seen_from(305_000), 305_000);
    }

    /// A pause after a deadline and before the post is measured by its overlap with that span.
    #[test]
    fn the_pauses_between_a_deadline_and_its_post_are_measured() {
        let mut w = PauseWatch::new();
        w.reading(1_000);
        w.reading(1_600); // a pass sees the completion due at 1,500
        w.reading(60_000); // and is paused before it posts it
        assert!(!w.paused_at(1_500), "due before the pause began");
        assert_eq!(w.paused_within(1_500, 60_100), 58_400);
        assert_eq!(w.paused_within(60_000, 60_100), 0, "after the pause");
        assert_eq!(w.paused_within(1_000, 1_500), 0, "before it");
        // Work declared before a pause is not counted as the pause.
        w.allow(10, 0);
        w.reading(100_000);
        assert_eq!(
            w.paused_within(60_000, 100_000),
            40_000 - allowance_ns(10, 0),
            "the gap less its allowance"
        );
    }

    /// A pause of the model lock's holder holds the other threads' deadlines inside it, once
    /// each; a thread that took it in does not take it again.
    #[test]
    fn a_holders_pause_is_taken_in_by_the_other_threads_once() {
        let holder = HolderPauses::default();
        let mut w = PauseWatch::new();
        holder.import(&mut w);
        assert!(!w.paused_at(5_000), "no pause published yet");
        holder.publish(1_000, 9_000);
        holder.import(&mut w);
        assert_eq!(w.held_at(5_000), Some(Held::Paused));
        assert!(!w.paused_at(9_500));
        let next = w.next;
        holder.import(&mut w);
        assert_eq!(w.next, next, "taken in once");
        // Two published before a thread looks: it takes in both.
        holder.publish(20_000, 30_000);
        holder.publish(40_000, 50_000);
        holder.import(&mut w);
        assert!(w.paused_at(25_000) && w.paused_at(45_000));
        let mut other = PauseWatch::new();
        holder.import(&mut other);
        assert!(other.paused_at(2_000) && other.paused_at(25_000));
    }

    /// A sleep that ends past the time the thread had to be back marks the deadlines in
    /// between wake-late, apart from pauses; one that ends in time marks nothing.
    #[test]
    fn a_late_wake_up_holds_the_deadlines_after_the_time_it_was_due() {
        let mut w = PauseWatch::new();
        w.reading(1_000);
        w.woke(2_000, Some(100_000), 100_500, 5_000);
        assert!(w.held_at(100_200) == Some(Held::WokeLate));
        assert!(
            w.held_at(100_000) == Some(Held::WokeLate),
            "due when the thread had to be back"
        );
        assert_eq!(w.held_at(99_999), None, "before the time it was due: on it");
        assert_eq!(w.held_at(100_500), None);
        w.woke(100_600, Some(200_000), 150_000, 5_000);
        assert_eq!(w.held_at(175_000), None, "woke in time");
        w.reading(151_000);
        assert_eq!(
            w.held_at(149_000),
            None,
            "the sleep is not a pause: the chain restarted at the wake-up"
        );
        w.reading(170_000);
        assert_eq!(w.held_at(165_000), Some(Held::Paused));
    }

    /// A thread parked on the doorbell that the kernel runs long after a ring: what fell due
    /// from the ring plus the thread's margin to its wake-up is wake-late, once, from the
    /// earliest ring; a ring before the sleep or within the margin marks nothing.
    #[test]
    fn a_ring_answered_later_than_the_margin_holds_what_fell_due_after_it() {
        let mut w = PauseWatch::new();
        w.woke(10_000, None, 500_000, 20_000);
        w.taken(5_000); // rung before it slept: taken on a pass, not a wake-up
        assert_eq!(w.held_at(300_000), None);
        w.taken(490_000); // within the margin
        assert_eq!(w.held_at(495_000), None);
        w.taken(100_000);
        assert_eq!(w.held_at(119_999), None, "within the margin of the ring");
        assert_eq!(w.held_at(120_000), Some(Held::WokeLate));
        assert_eq!(w.held_at(499_999), Some(Held::WokeLate));
        let next = w.next;
        w.taken(200_000);
        w.taken(100_000);
        assert_eq!(w.next, next, "marked once");
        w.taken(50_000);
        assert_eq!(
            w.held_at(70_000),
            Some(Held::WokeLate),
            "an earlier ring widens it"
        );
    }

    /// A pause of 100 µs held 50 completions: while the thread posts them, more fall due
    /// after the pause's end; those are held by the same pause until a post finds nothing
    /// held (the thread has caught up).
    #[test]
    fn what_falls_due_while_the_thread_catches_up_on_a_pause_is_held_by_it() {
        let mut w = PauseWatch::new();
        w.reading(1_000);
        w.reading(101_000);
        assert_eq!(w.held_at(50_000), Some(Held::Paused));
        assert_eq!(w.held_at(101_500), None, "after the pause: not yet held");
        // The held one is posted at 102 µs: 101.5 µs fell due during the catch-up.
        w.catching_up(50_000, 102_000);
        assert_eq!(w.held_at(101_500), Some(Held::Paused));
        w.catching_up(101_500, 103_000);
        assert_eq!(w.held_at(102_500), Some(Held::Paused));
        assert_eq!(
            w.held_at(103_000),
            None,
            "due when the thread was free again"
        );
        // A deadline held by nothing extends nothing.
        w.catching_up(200_000, 300_000);
        assert_eq!(w.held_at(250_000), None);
        // A late wake-up's catch-up stays wake-late.
        w.woke(300_000, Some(400_000), 500_000, 10_000);
        w.catching_up(450_000, 510_000);
        assert_eq!(w.held_at(505_000), Some(Held::WokeLate));
    }

    #[test]
    fn the_latest_pauses_are_remembered() {
        let mut w = PauseWatch::new();
        let mut t = 0;
        for _ in 0..RECENT + 2 {
            w.reading(t);
            t += 10_000; // each gap a pause
        }
        w.reading(t);
        assert!(w.paused_at(t - 5_000), "the newest");
        assert!(w.paused_at(t - (RECENT as u64 - 1) * 10_000 - 5_000));
        assert!(
            !w.paused_at(5_000),
            "the oldest are forgotten: {RECENT} kept"
        );
    }
}
