//! The one report of an emulated device: what `nvarray bench --engine emu` prints, and what
//! the front ends (`nvarray serve`, `nvarray mount`) print for the device they served.

use nvarray_host::{Device, LatenessReport};
use nvarray_model::{Breakdown, Component, ResourceBusy};
use nvarray_report::{EmulatorSetup, LatenessNs, MachineJitterNs, RunReport, StreamStats};

/// The report of a run on an opened `device`: totals from `streams` (what the host side
/// measured, each latency recorded as `host` time), the model's utilisation and wear, the
/// modelled device's share of the mean latency moved from `host` to its components, CPU
/// seconds per GB, the emulator's lateness and faithfulness verdict, and its setup.
/// `nvarray bench` and the front ends (`nvarray serve`, `nvarray mount`) all report through
/// it, so their tables read the same; `verified_blocks`, `host_cpus` and `host_threads` are
/// left empty for the caller, which knows its threads, to fill.
pub fn device_report(
    device: &Device,
    streams: &[StreamStats],
    elapsed_ns: u64,
    cpu_seconds: f64,
) -> RunReport {
    device_report_over(
        device,
        streams,
        elapsed_ns,
        cpu_seconds,
        &DeviceReading::default(),
    )
}

/// [`device_report`] leaving out what the device did in `excluded` (the ramps of a run with
/// `ramp_time`): its utilisation and its share of the latency are then the measured
/// window's, over `elapsed_ns`, the window's length.
pub fn device_report_over(
    device: &Device,
    streams: &[StreamStats],
    elapsed_ns: u64,
    cpu_seconds: f64,
    excluded: &DeviceReading,
) -> RunReport {
    let (device_cpu_ns, device_busy_ns) = (device.device_cpu_ns(), device.device_busy_ns());
    let mut window = DeviceReading::default();
    let mut report = device.with_model(|model, sum, count| {
        let now = DeviceReading {
            busy: model.resource_busy(),
            sum: *sum,
            commands: count,
            device_cpu_ns,
            device_busy_ns,
        };
        window = now.since(excluded);
        let mut report = RunReport::from_model_over("emu", model, window.busy, streams, elapsed_ns);
        attribute_device_time(&mut report, &window.sum, window.commands);
        report
    });
    report.set_cpu_seconds(cpu_seconds);
    let lateness = device.lateness();
    report.lateness_ns = lateness_ns(&lateness);
    report.verdict = lateness.verdict;
    report.faithful = lateness.faithful();
    report.unfaithful_reason = lateness.unfaithful_reason;
    let threads = device.options().device_threads;
    if let (Some(why), true) = (
        &mut report.unfaithful_reason,
        lateness.own_p99_ns > lateness.bound_ns,
    ) {
        if let Some(note) = saturation(threads, window.device_busy_ns, window.commands, elapsed_ns)
        {
            why.push_str("; ");
            why.push_str(&note);
        }
    }
    report.machine_jitter_ns = device.jitter().map(|j| MachineJitterNs {
        p50: j.p50_ns,
        p99: j.p99_ns,
        p9999: j.p99_99_ns,
        max: j.max_ns,
        samples: j.samples,
        observed_ns: j.observed_ns,
    });
    report.emulator = Some(emulator_setup(device, window.device_cpu_ns, elapsed_ns));
    report
}

/// The report's lateness figures: the device's `lateness`, with each share of late
/// completions in percent.
fn lateness_ns(lateness: &LatenessReport) -> LatenessNs {
    LatenessNs {
        mean: lateness.mean_ns,
        p50: lateness.p50_ns,
        p99: lateness.p99_ns,
        max: lateness.max_ns,
        completions: lateness.completions,
        machine_late: lateness.machine_late,
        machine_late_percent: percent_of(lateness.machine_late, lateness.completions),
        wake_late: lateness.wake_late,
        wake_late_percent: percent_of(lateness.wake_late, lateness.completions),
        host_code: lateness.host_code,
        host_code_percent: percent_of(lateness.host_code, lateness.completions),
        own_mean: lateness.own_mean_ns,
        own_p50: lateness.own_p50_ns,
        own_p99: lateness.own_p99_ns,
        own_max: lateness.own_max_ns,
    }
}

/// How `device` emulates: its threads, stack and CPUs, and the device threads' CPU time
/// (`device_cpu_ns` in the window of `elapsed_ns`) per second. What the caller knows of its
/// own threads (verified blocks, host CPUs and threads) is left empty.
fn emulator_setup(device: &Device, device_cpu_ns: u64, elapsed_ns: u64) -> EmulatorSetup {
    let options = device.options();
    EmulatorSetup {
        device_threads: options.device_threads,
        work_split: device.work_split(),
        serial_ns_per_command: device.serial_ns_per_command(),
        backing_pages: device.backing_pages().name(),
        stack: options.stack.name(),
        completion: device.completion().name(),
        verified_blocks: 0,
        checked_blocks: 0,
        device_cpus: (0..options.device_threads)
            .filter_map(|i| options.cpus.nth(i))
            .collect(),
        host_cpus: Vec::new(),
        host_threads: 0,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        // Per second of the measured window; inline the host threads run the device, and
        // their time is the process's.
        device_cpu_per_second: (options.device_threads > 0 && elapsed_ns > 0)
            .then(|| device_cpu_ns as f64 / elapsed_ns as f64),
        doorbell_wakeups: device.doorbell_wakeups(),
    }
}

/// The device threads at their limit: busy (in rounds that found work) 95 % of the window or
/// more, so the emulator's own lateness is its rate, not a stall. Says so with the rate it
/// kept (`commands` in `elapsed_ns`); `None` otherwise, or inline (the host threads run the
/// device, and their time is the host's too).
fn saturation(threads: usize, busy_ns: u64, commands: u64, elapsed_ns: u64) -> Option<String> {
    if threads == 0 || elapsed_ns == 0 {
        return None;
    }
    let share = busy_ns as f64 / (elapsed_ns as f64 * threads as f64);
    (share >= 0.95).then(|| {
        format!(
            "the device {} busy {:.0} % of the run: the emulator cannot keep up with the model's rate here, and kept {:.0} commands a second (`--compare-sim` gives the model's own rate)",
            if threads == 1 { "thread was" } else { "threads were" },
            share * 100.0,
            commands as f64 * 1e9 / elapsed_ns as f64,
        )
    })
}

/// `part` in percent of `whole` (0 of nothing).
fn percent_of(part: u64, whole: u64) -> f64 {
    assert!(part <= whole, "{part} of {whole} completions");
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// What a device had done up to one instant (or in a window: the difference of two): its
/// resources' busy time and its commands' modelled breakdowns summed.
#[derive(Clone, Debug, Default)]
pub struct DeviceReading {
    busy: ResourceBusy,
    sum: Breakdown,
    commands: u64,
    /// The device threads' CPU time (`Device::device_cpu_ns`) and the wall time they spent
    /// in rounds with work (`Device::device_busy_ns`).
    device_cpu_ns: u64,
    device_busy_ns: u64,
}

impl DeviceReading {
    /// The device's figures now.
    pub fn take(device: &Device) -> DeviceReading {
        let (device_cpu_ns, device_busy_ns) = (device.device_cpu_ns(), device.device_busy_ns());
        device.with_model(|model, sum, commands| DeviceReading {
            busy: model.resource_busy(),
            sum: *sum,
            commands,
            device_cpu_ns,
            device_busy_ns,
        })
    }

    /// What the device did since `earlier`.
    pub fn since(&self, earlier: &DeviceReading) -> DeviceReading {
        DeviceReading {
            busy: self.busy.since(&earlier.busy),
            sum: breakdown_zip(&self.sum, &earlier.sum, u64::saturating_sub),
            commands: self.commands.saturating_sub(earlier.commands),
            device_cpu_ns: self.device_cpu_ns.saturating_sub(earlier.device_cpu_ns),
            device_busy_ns: self.device_busy_ns.saturating_sub(earlier.device_busy_ns),
        }
    }

    /// Two windows together.
    pub fn plus(&self, other: &DeviceReading) -> DeviceReading {
        DeviceReading {
            busy: self.busy.plus(&other.busy),
            sum: breakdown_zip(&self.sum, &other.sum, u64::saturating_add),
            commands: self.commands + other.commands,
            device_cpu_ns: self.device_cpu_ns + other.device_cpu_ns,
            device_busy_ns: self.device_busy_ns + other.device_busy_ns,
        }
    }
}

/// Two breakdowns combined component by component.
fn breakdown_zip(a: &Breakdown, b: &Breakdown, f: impl Fn(u64, u64) -> u64) -> Breakdown {
    let mut out = Breakdown::default();
    for c in Component::ALL {
        out.set(c, f(a.get(c), b.get(c)));
    }
    out
}

/// Splits each stream's mean latency into the modelled device's components and `host`: what
/// the software stack and the emulation added on top. The device's share of a request is
/// every command's modelled time over the requests they served (the emulator cannot tell
/// streams apart, so every stream gets the same share): one command per request gives the
/// model's mean command, and a request split into several commands (a FUSE read-modify-write,
/// an NBD request larger than a command) carries all of them. Where commands overlapped, so
/// that their sum exceeds a stream's mean latency, the device's components are scaled down
/// to that mean and host is 0: the components always add up to the mean, as the report says.
fn attribute_device_time(report: &mut RunReport, sum: &Breakdown, commands: u64) {
    let requests = report.totals.requests;
    if commands == 0 || requests == 0 {
        return;
    }
    let per_request = |c: Component| sum.get(c) as f64 / requests as f64;
    let device_total: f64 = Component::ALL
        .iter()
        .filter(|&&c| c != Component::Host)
        .map(|&c| per_request(c))
        .sum();
    let totals =
        std::iter::once(&mut report.totals).chain(report.streams.iter_mut().map(|s| &mut s.totals));
    for t in totals {
        let mean = t.latency_ns.mean;
        let scale = if device_total > mean && device_total > 0.0 {
            mean / device_total
        } else {
            1.0
        };
        let host = (mean - device_total * scale).max(0.0);
        for (name, ns) in t.breakdown_ns.0.iter_mut() {
            let c = Component::ALL
                .iter()
                .copied()
                .find(|c| c.name() == *name)
                .expect("breakdown names are component names");
            *ns = if c == Component::Host {
                host
            } else {
                per_request(c) * scale
            };
        }
        let parts_ns: f64 = t.breakdown_ns.0.iter().map(|(_, ns)| ns).sum();
        assert!(
            (parts_ns - mean).abs() <= 1e-9 * mean.max(1.0),
            "the breakdown adds up to {parts_ns} ns, the mean latency is {mean} ns"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of `requests` requests of `latency_ns` each, all host time as recorded.
    fn report(requests: u64, latency_ns: u64) -> RunReport {
        let mut s = StreamStats::new("s");
        for _ in 0..requests {
            s.record_host(true, 4096, latency_ns);
        }
        RunReport {
            totals: s.totals(1_000_000),
            ..RunReport::default()
        }
    }

    fn parts(r: &RunReport) -> f64 {
        r.totals.breakdown_ns.0.iter().map(|(_, ns)| ns).sum()
    }

    fn get(r: &RunReport, name: &str) -> f64 {
        r.totals
            .breakdown_ns
            .0
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1
    }

    #[test]
    fn one_command_per_request_keeps_the_models_mean_command() {
        let mut r = report(10, 15_000);
        let mut sum = Breakdown::default();
        sum.set(Component::Media, 10 * 4_000);
        sum.set(Component::Link, 10 * 1_000);
        attribute_device_time(&mut r, &sum, 10);
        assert_eq!(get(&r, "media"), 4_000.0);
        assert_eq!(get(&r, "link"), 1_000.0);
        assert_eq!(get(&r, "host"), 10_000.0);
        assert_eq!(parts(&r), 15_000.0);
    }

    /// A FUSE request that became a read and a write (read-modify-write) carries both: the
    /// per-command mean under-counted it; and where commands overlap, the parts are scaled so
    /// they still add up (the report printed 15.12 µs mean, parts 15.57 µs, host 0).
    #[test]
    fn split_and_overlapping_commands_still_add_up_to_the_mean() {
        let mut r = report(10, 15_000);
        let mut sum = Breakdown::default();
        sum.set(Component::Media, 20 * 5_000);
        attribute_device_time(&mut r, &sum, 20);
        assert_eq!(get(&r, "media"), 10_000.0);
        assert_eq!(get(&r, "host"), 5_000.0);
        assert_eq!(parts(&r), 15_000.0);

        let mut r = report(10, 15_000);
        let mut sum = Breakdown::default();
        sum.set(Component::Media, 20 * 12_000);
        sum.set(Component::Link, 20 * 3_000);
        attribute_device_time(&mut r, &sum, 20);
        assert_eq!(get(&r, "host"), 0.0);
        assert!((parts(&r) - 15_000.0).abs() < 1e-6, "{}", parts(&r));
        assert!((get(&r, "media") / get(&r, "link") - 4.0).abs() < 1e-9);
    }

    /// Only device threads busy nearly all the run are said to be at their limit, with the
    /// rate they kept; never inline, never over no time.
    #[test]
    fn device_threads_at_their_limit_are_named_with_the_rate_they_kept() {
        let second = 1_000_000_000;
        assert_eq!(saturation(0, second, 1000, second), None, "inline");
        assert_eq!(saturation(1, second, 1000, 0), None, "no time");
        assert_eq!(
            saturation(2, second, 1000, second),
            None,
            "half of two threads"
        );
        assert_eq!(saturation(1, 940_000_000, 1000, second), None);
        let note = saturation(1, 960_000_000, 2_500_000, second).expect("at its limit");
        assert!(note.contains("thread was busy 96 %"), "{note}");
        assert!(note.contains("kept 2500000 commands a second"), "{note}");
    }
}
