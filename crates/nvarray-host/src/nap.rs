//! Napping: how a thread with commands in flight and nothing else to do gives the CPU away
//! without making a completion late. The one place the driver's waiting policy lives; front
//! ends ask `QueuePair::nap_time` instead of reading the device's clock.

use std::collections::HashMap;
use std::time::Duration;

pub use nvarray_emu::fine_timer_slack;
use nvarray_emu::{pauses, Emulator, Opcode};
use nvarray_model::{Command, DeviceConfig, DeviceModel, Op};

/// How long before the model's next deadline an inline nap ends. A nap is a real kernel sleep
/// (`nanosleep`), which on the test VMs overshoots by ~5–15 µs even with a 1 µs timer slack;
/// ending it this early and polling the rest keeps the completion on time.
pub(crate) const NAP_WAKE_MARGIN_NS: u64 = 25_000;

/// Naps shorter than this are not taken: the thread polls instead. A nap costs a system call
/// or two on top of its overshoot, and the front ends send their pending replies before one.
/// (The NBD server used 60 µs before the deadline, i.e. 35 µs of nap after the margin.)
pub(crate) const NAP_MIN_NS: u64 = 35_000;

/// In inline mode no device thread will raise an interrupt and the device runs only when a
/// host thread polls, so a sleeper sleeps until shortly before the model's next deadline
/// (`NAP_WAKE_MARGIN_NS`) and polls from there; a nap shorter than `NAP_MIN_NS` is not taken.
/// Inline mode therefore gives the CPU away during long commands (flash) without making
/// completions late; the cost of an interrupt and a wake-up itself is only paid, and
/// measured, with device threads.
pub(crate) fn inline_nap_time(emu: &Emulator) -> Option<Duration> {
    let deadline = emu.next_deadline_ns()?;
    let nap_ns = deadline
        .saturating_sub(NAP_WAKE_MARGIN_NS)
        .saturating_sub(emu.now_ns());
    (nap_ns >= NAP_MIN_NS).then(|| Duration::from_nanos(nap_ns))
}

/// Inline mode's sleep (`inline_nap_time`); with no deadline at all (nothing in the model),
/// it yields the CPU once.
/// A nap that ends after the deadline it was for marks what fell due meanwhile wake-late
/// (`pauses::PauseWatch::woke`): the kernel woke the thread later than the margin allowed.
pub(crate) fn inline_nap(emu: &Emulator) {
    // The chain is read up to here (a pause since the last pass is found), then restarted:
    // asking for the deadline takes the model's lock, perhaps after waiting for it, a wait
    // that is another thread's (`pauses::HolderPauses`), not this one's; a yield is unbounded.
    let before = emu.now_ns();
    pauses::this_thread(|w| w.reading(before));
    let next = emu.next_deadline_ns();
    let restart = || pauses::this_thread(|w| w.restart(emu.now_ns()));
    let Some(deadline) = next else {
        std::thread::yield_now();
        restart();
        return;
    };
    restart();
    if let Some(nap) = inline_nap_time(emu) {
        fine_timer_slack();
        let asleep = emu.now_ns();
        std::thread::sleep(nap);
        let woke = emu.now_ns();
        pauses::this_thread(|w| w.woke(asleep, Some(deadline), woke, NAP_WAKE_MARGIN_NS));
    }
}

/// `CompletionMode::Adaptive`'s rule: a thread spins for a command whose modelled latency on
/// an idle device is shorter than the threshold, and may sleep while every command it has in
/// flight takes at least that long.
///
/// Moneta's rule was a request size (spin below 4 KB). A size means different waits on
/// different devices (4 KiB is 8 µs on Moneta and milliseconds on a disk), while what decides
/// whether a sleep pays is the wait against the cost of waking up: 12–28 µs for a futex sleep
/// and wake on the project's 2-core VMs, where spinning won at every size up to 256 KiB on
/// dram (54 µs spinning, 82 µs sleeping; `docs/perf.md`, "Spin versus sleep"). So the rule is
/// on the modelled latency, and the default threshold (`ADAPTIVE_THRESHOLD_NS_DEFAULT`,
/// 100 µs) lets a sleep cost at most about a fifth of the command at the median wake-up.
#[derive(Clone, Debug)]
pub(crate) struct AdaptiveRule {
    threshold_ns: u64,
    config: DeviceConfig,
    /// Per (read?, length): the modelled latency of a command of that shape on an idle device.
    latencies: HashMap<(bool, u32), Option<u64>>,
    /// The last shape asked about, answered without the map (a workload of one size).
    last: Option<((bool, u32), Option<u64>)>,
}

impl AdaptiveRule {
    pub(crate) fn new(config: &DeviceConfig, threshold_ns: u64) -> Self {
        AdaptiveRule {
            threshold_ns,
            config: config.clone(),
            latencies: HashMap::new(),
            last: None,
        }
    }

    /// Whether a command lets its thread sleep (a flush, a deallocate, zone management or a
    /// zone report never does: none has a modelled latency).
    pub(crate) fn sleeps_for(&mut self, op: Opcode, len_bytes: u32) -> bool {
        self.sleep_latency_ns(op, len_bytes).is_some()
    }

    /// A command's modelled latency on an idle device if it lets its thread sleep (it reaches
    /// the threshold), else `None`.
    pub(crate) fn sleep_latency_ns(&mut self, op: Opcode, len_bytes: u32) -> Option<u64> {
        let is_read = match op {
            Opcode::Read => true,
            Opcode::Write | Opcode::ZoneAppend => false,
            Opcode::Flush
            | Opcode::Deallocate
            | Opcode::ZoneManage { .. }
            | Opcode::ZoneReport { .. } => return None,
        };
        let shape = (is_read, len_bytes);
        let latency = match self.last {
            Some((last, latency)) if last == shape => latency,
            _ => {
                let config = &self.config;
                let latency = *self
                    .latencies
                    .entry(shape)
                    .or_insert_with(|| idle_latency_ns(config, is_read, len_bytes));
                self.last = Some((shape, latency));
                latency
            }
        };
        latency.filter(|&ns| ns >= self.threshold_ns)
    }

    /// Whether a thread whose commands in flight (`in_flight` of them, each letting it sleep,
    /// the quickest taking `least_ns` on an idle device) may sleep now: only while the gap it
    /// can expect between their completions, `least_ns / in_flight`, still reaches the
    /// threshold. Deep queues of slow commands complete often: tlc's 450 µs reads at QD 16
    /// one every ~30 µs, and a wake-up per completion (12-28 µs here) held every reissue back
    /// (0.93 of the simulator's IOPS, the emulator's own p99 19 µs; spinning 0.99 and 3-5 µs;
    /// docs/perf.md, issue 56).
    pub(crate) fn sleep_pays(&self, least_ns: u64, in_flight: usize) -> bool {
        least_ns / (in_flight.max(1) as u64) >= self.threshold_ns
    }
}

/// Whether a thread that keeps one request in flight waits for it by spinning alone, each
/// request a single command: the `Spin` stack, a completion mode that never sleeps for these
/// requests (`Spin`, `InData`, or `Adaptive` below its threshold for every one), and every
/// length within a tag buffer. `reads` and `writes` say which directions occur, `lens_bytes`
/// the request lengths. `--device-threads auto` then runs the device inline on that thread:
/// a device thread would have no other command to overlap with its wait, and each command
/// would cross between the two cores twice (dram at QD 1: host p50 1,994 ns inline against
/// 2,154-2,174 with a device thread, the model's being 1,699; docs/perf.md).
pub fn waits_by_spinning_alone(
    config: &DeviceConfig,
    options: &crate::Options,
    reads: bool,
    writes: bool,
    lens_bytes: impl IntoIterator<Item = u32>,
) -> bool {
    use crate::{CompletionMode, Stack};
    if options.stack != Stack::Spin {
        return false;
    }
    let buffer_bytes = options
        .buffer_bytes
        .unwrap_or(crate::options::BUFFER_BYTES_DEFAULT)
        .min(config.controller.max_transfer_bytes);
    let completion = options
        .completion
        .unwrap_or_else(|| CompletionMode::default_for(config.interface.protocol));
    let mut rule = AdaptiveRule::new(config, options.adaptive_threshold_ns);
    lens_bytes.into_iter().all(|len| {
        let mut sleeps = |op| rule.sleeps_for(op, len);
        let spins = match completion {
            CompletionMode::Spin | CompletionMode::InData => true,
            CompletionMode::Sleep => false,
            CompletionMode::Adaptive => {
                let sleeps_somewhere =
                    (reads && sleeps(Opcode::Read)) || (writes && sleeps(Opcode::Write));
                !sleeps_somewhere
            }
        };
        len <= buffer_bytes && spins
    })
}

/// The modelled latency of one command alone on an idle device, or None if the device refuses
/// it (the device will refuse it at once, so there is nothing to sleep through). Asked of a
/// fresh model (`DeviceConfig::fresh`: not preconditioned again, which took a second on 8 GiB);
/// on a preconditioned device every page is mapped, so a read's page is written first, as
/// preconditioning would have, and the read goes once that write is done.
pub fn idle_latency_ns(config: &DeviceConfig, is_read: bool, len_bytes: u32) -> Option<u64> {
    let mut model = DeviceModel::new(&config.fresh());
    // The command's visible time, and when the model is idle again (no event left).
    let run = |model: &mut DeviceModel, op: Op, at: u64| -> Option<(u64, u64)> {
        let command = Command {
            id: 0,
            op,
            offset_bytes: 0,
            len_bytes,
            placement: 0,
        };
        model.submit(command, at).ok()?;
        let (mut visible_ns, mut idle_ns) = (None, at);
        while let Some(t) = model.next_event_ns() {
            model.advance(t, |c| visible_ns = Some(c.visible_ns));
            idle_ns = t;
        }
        Some((visible_ns?, idle_ns))
    };
    let mut at = 0;
    if is_read && config.preconditioned() {
        let (written, idle) = run(&mut model, Op::Write, 0)?;
        at = written.max(idle);
    }
    let op = if is_read { Op::Read } else { Op::Write };
    let visible_ns = run(&mut model, op, at)?.0;
    assert!(
        visible_ns >= at,
        "a command submitted at {at} ns completed at {visible_ns} ns"
    );
    Some(visible_ns - at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvarray_model::presets::preset;

    /// Issue 56: the rule's idle latency was asked of a model built from the run's own
    /// configuration, preconditioning included: on 8 GiB of `tlc` the run's first command
    /// waited a second for a second preconditioned FTL. It is asked of a fresh one now, with
    /// the same answers: a read of a preconditioned device touches flash (a mapped page), one
    /// of a device not preconditioned does not (never written: zeros from the controller).
    #[test]
    fn the_idle_latency_of_a_preconditioned_device_is_asked_of_a_fresh_model() {
        let set = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let base = [
            ("memory.capacity_bytes", "1073741824"),
            ("memory.erase_block_bytes", "65536"),
            ("ftl.enabled", "true"),
        ];
        let tlc = preset("tlc").unwrap();
        let fresh = tlc.load(&set(&base)).unwrap();
        let mut with = base.to_vec();
        with.push(("ftl.precondition", "random:1"));
        let preconditioned = tlc.load(&set(&with)).unwrap();
        assert!(preconditioned.preconditioned() && !fresh.preconditioned());
        assert!(!preconditioned.fresh().preconditioned());
        let read = |c: &DeviceConfig| idle_latency_ns(c, true, 4096).expect("a read in range");
        let write = |c: &DeviceConfig| idle_latency_ns(c, false, 4096).expect("in range");
        // A page read: 450 µs of flash, on the preconditioned device only.
        assert!(read(&preconditioned) > 450_000, "{}", read(&preconditioned));
        assert!(read(&fresh) < 100_000, "{}", read(&fresh));
        assert_eq!(write(&preconditioned), write(&fresh));
        // What the old code answered, from the preconditioned model itself (a second of
        // preconditioning on 8 GiB; this one is 1 GiB).
        let mut model = DeviceModel::new(&preconditioned);
        let command = Command {
            id: 0,
            op: Op::Read,
            offset_bytes: 0,
            len_bytes: 4096,
            placement: 0,
        };
        model.submit(command, 0).unwrap();
        let mut visible = None;
        while let Some(t) = model.next_event_ns() {
            model.advance(t, |c| visible = Some(c.visible_ns));
        }
        // (Within 1 %: the fresh model's read follows the write of its page, whose bookings
        // move its transfers by a few ns.) The rule's decision is the same.
        let (old, new) = (visible.expect("the read completed"), read(&preconditioned));
        assert!(old.abs_diff(new) * 100 <= old, "old {old} ns, new {new} ns");
        assert_eq!(old >= ADAPTIVE_THRESHOLD_NS, new >= ADAPTIVE_THRESHOLD_NS);
    }

    /// The rule follows the device, not the size: the same 4 KiB read spins on Moneta and
    /// sleeps on a disk; the threshold is the modelled latency.
    #[test]
    fn adaptive_sleeps_for_commands_whose_modelled_latency_reaches_the_threshold() {
        let moneta = preset("moneta").unwrap().load(&[]).unwrap();
        let hdd = preset("hdd").unwrap().load(&[]).unwrap();
        let mut on_moneta = AdaptiveRule::new(&moneta, ADAPTIVE_THRESHOLD_NS);
        let mut on_hdd = AdaptiveRule::new(&hdd, ADAPTIVE_THRESHOLD_NS);
        assert!(!on_moneta.sleeps_for(Opcode::Read, 4096), "8 µs: spin");
        assert!(on_hdd.sleeps_for(Opcode::Read, 4096), "milliseconds: sleep");
        assert!(!on_hdd.sleeps_for(Opcode::Flush, 0), "a flush never sleeps");
        // A large transfer on Moneta takes long enough (1 MiB over a 1.7 GB/s link).
        assert!(on_moneta.sleeps_for(Opcode::Read, 1 << 20));
        // Exactly at the threshold sleeps, one ns above it spins.
        let latency = idle_latency_ns(&moneta, true, 4096).unwrap();
        assert!(AdaptiveRule::new(&moneta, latency).sleeps_for(Opcode::Read, 4096));
        assert!(!AdaptiveRule::new(&moneta, latency + 1).sleeps_for(Opcode::Read, 4096));
        // A command the device refuses never sleeps.
        assert!(!on_hdd.sleeps_for(Opcode::Read, 3));
    }

    /// Deep queues of slow commands complete too often for a sleep each: tlc's 450 µs reads
    /// let the thread sleep at QD 1 and 4, not at 16 (one completion every ~30 µs).
    #[test]
    fn adaptive_spins_when_completions_are_expected_closer_than_the_threshold() {
        let tlc = preset("tlc").unwrap().load(&[]).unwrap();
        let mut rule = AdaptiveRule::new(&tlc, ADAPTIVE_THRESHOLD_NS);
        let read = rule
            .sleep_latency_ns(Opcode::Read, 4096)
            .expect("a flash read sleeps");
        assert!(read > 450_000, "{read}");
        assert!(rule.sleep_pays(read, 1) && rule.sleep_pays(read, 4));
        assert!(!rule.sleep_pays(read, 16));
        // The edge: as many in flight as fit the threshold into the latency.
        let most = (read / ADAPTIVE_THRESHOLD_NS) as usize;
        assert!(rule.sleep_pays(read, most));
        assert!(!rule.sleep_pays(read, most + 1));
        assert_eq!(rule.sleep_latency_ns(Opcode::Flush, 0), None);
    }

    const ADAPTIVE_THRESHOLD_NS: u64 = crate::options::ADAPTIVE_THRESHOLD_NS_DEFAULT;
}
