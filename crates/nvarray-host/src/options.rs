//! How the host side is put together: the software stack (the Moneta ladder), how a thread
//! waits for a completion, and where the device's bytes live.

use std::fmt;
use std::str::FromStr;

/// Default tag buffer size: large enough for the usual benchmark sizes, small enough that a
/// thousand tags fit the arena.
pub const BUFFER_BYTES_DEFAULT: u32 = 256 * 1024;

pub use nvarray_emu::cpus::{allowed_cpus, pin_this_thread, CpuList};
pub use nvarray_emu::{BackingFaults, BackingKind, BackingOp};

/// The Moneta software-stack ladder (Moneta slides, "Software optimizations": baseline, then
/// remove the I/O scheduler (−10 % software latency), then issue with one atomic 64-bit write
/// instead of several registers under a lock (−10 %), then spin instead of sleeping (−54 %)).
/// Each step removes exactly one cost from the one before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stack {
    /// Requests go through a scheduler thread, which issues them on one queue pair shared by
    /// every thread behind a lock; the requester sleeps until the completion wakes it (the
    /// kernel block layer of the paper).
    Baseline,
    /// No scheduler thread: each requester issues on the shared, locked queue pair itself and
    /// sleeps for completion.
    NoSched,
    /// Each thread issues on its own queue pair with one atomic store, no lock; it still
    /// sleeps for completion.
    Atomic,
    /// As `Atomic`, and the thread waits as `--completion` says (default adaptive).
    #[default]
    Spin,
}

impl Stack {
    pub const ALL: [Stack; 4] = [Stack::Baseline, Stack::NoSched, Stack::Atomic, Stack::Spin];

    pub fn name(self) -> &'static str {
        match self {
            Stack::Baseline => "baseline",
            Stack::NoSched => "nosched",
            Stack::Atomic => "atomic",
            Stack::Spin => "spin",
        }
    }
}

/// How a thread waits for its command to complete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompletionMode {
    /// Poll the completion queue until the entry appears.
    Spin,
    /// Sleep on a futex until the device (or whoever drains the queue) wakes the thread.
    Sleep,
    /// Spin for commands whose modelled latency on an idle device is under the threshold
    /// (`Options::adaptive_threshold_ns`), sleep while every command in flight takes at least
    /// that long (Moneta's rule, on time rather than size; see `nap::AdaptiveRule`) and they
    /// are not so many that their completions come closer together than the threshold.
    #[default]
    Adaptive,
    /// The DC Express protocol's, and only its: reads complete in the data (the device writes
    /// a completion word next to the data in the tag's buffer and posts no completion entry;
    /// the host spins on that word); writes and flushes spin on the completion words.
    InData,
}

impl CompletionMode {
    /// The completion mode a device speaking `protocol` gets unless one is asked for: in-data
    /// for DC Express (it has no other), adaptive otherwise.
    pub fn default_for(protocol: nvarray_model::Protocol) -> CompletionMode {
        match protocol {
            nvarray_model::Protocol::DcExpress => CompletionMode::InData,
            _ => CompletionMode::Adaptive,
        }
    }
}

impl CompletionMode {
    pub const ALL: [CompletionMode; 4] = [
        CompletionMode::Spin,
        CompletionMode::Sleep,
        CompletionMode::Adaptive,
        CompletionMode::InData,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CompletionMode::Spin => "spin",
            CompletionMode::Sleep => "sleep",
            CompletionMode::Adaptive => "adaptive",
            CompletionMode::InData => "in-data",
        }
    }
}

macro_rules! name_parsing {
    ($t:ty, $what:literal) => {
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                <$t>::ALL
                    .into_iter()
                    .find(|v| v.name() == s)
                    .ok_or_else(|| {
                        let names: Vec<&str> = <$t>::ALL.iter().map(|v| v.name()).collect();
                        format!(
                            "unknown {} {s:?}: expected one of {}",
                            $what,
                            names.join(", ")
                        )
                    })
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

name_parsing!(Stack, "stack");
name_parsing!(CompletionMode, "completion mode");

/// `CompletionMode::Adaptive` spins for commands modelled to take less than this on an idle
/// device and may sleep from it up: a futex wake-up costs 12–28 µs on the project's 2-core
/// VMs (`docs/perf.md`, "Spin versus sleep"), so from 100 µs a sleep costs at most about a
/// fifth of the command at the median wake-up.
pub const ADAPTIVE_THRESHOLD_NS_DEFAULT: u64 = 100_000;

/// Everything `Device::open` needs besides the device description.
#[derive(Clone, Debug)]
pub struct Options {
    pub backing: BackingKind,
    /// Threads that run the device. 0 runs the device on whichever host thread polls (inline
    /// mode): fewer spinning threads than cores when a server and a client share the machine.
    pub device_threads: usize,
    pub stack: Stack,
    /// How threads wait; `None` takes the protocol's (`CompletionMode::default_for`).
    pub completion: Option<CompletionMode>,
    /// See `CompletionMode::Adaptive`.
    pub adaptive_threshold_ns: u64,
    /// Size of each tag's DMA buffer: the largest single command. Larger requests are split by
    /// the sync API. Default: the device's maximum transfer, capped so the arena stays small.
    pub buffer_bytes: Option<u32>,
    /// CPUs to pin the device threads (first) and the host threads (after them) to; empty
    /// pins nothing. See `CpuList`.
    pub cpus: CpuList,
    /// Faults to inject into the backing store: tests and campaigns only (`BackingFaults`).
    pub backing_faults: Option<std::sync::Arc<BackingFaults>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backing: BackingKind::Ram,
            device_threads: 1,
            stack: Stack::default(),
            completion: None,
            adaptive_threshold_ns: ADAPTIVE_THRESHOLD_NS_DEFAULT,
            buffer_bytes: None,
            cpus: CpuList::default(),
            backing_faults: None,
        }
    }
}

/// A device whose 4 KiB read takes at least this long on an idle device gets a thread of its
/// own under a front end's `--device-threads auto` even without a spare core
/// (`device_threads_for_front_end`). Its thread waits most of each command and gives the core
/// back when nothing is due (issue 56), while a front end's serving thread, blocked on its
/// clients' sockets, cannot post a completion on time: inline, `nvarray serve` under fio's
/// 4 KiB random reads on pcie-flash-2010 (55 µs a read) was NOT FAITHFUL with the emulator's
/// own p99 at 49-58 µs; with a device thread, machine-limited at 0.9-1.2 µs (docs/perf.md).
/// A dram device (4 µs) stays inline: its thread would spin beside the server and the client.
pub const FRONT_END_DEVICE_THREAD_NS: u64 = 20_000;

/// The device threads a front end's `--device-threads auto` picks: as `device_threads_auto`,
/// or one for a device whose idle 4 KiB read takes `idle_read_ns` of at least
/// `FRONT_END_DEVICE_THREAD_NS`.
pub fn device_threads_for_front_end(
    host_threads: usize,
    cores: usize,
    idle_read_ns: Option<u64>,
) -> usize {
    let slow = idle_read_ns.is_some_and(|ns| ns >= FRONT_END_DEVICE_THREAD_NS);
    device_threads_auto(host_threads, cores).max(usize::from(slow))
}

/// Largest number of device threads (more only take turns at the one serial model).
pub const DEVICE_THREADS_MAX: usize = 8;

/// The device threads `--device-threads auto` picks for `host_threads` spinning host threads
/// on a machine with `cores` CPUs: one when it gets a core of its own, else none (inline).
/// More spinning threads than cores make each wait for the scheduler's time slice (4 ms on
/// the test VMs) whenever another one holds the core, which wrecks latency and fidelity.
pub fn device_threads_auto(host_threads: usize, cores: usize) -> usize {
    usize::from(cores > host_threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_device_threads_never_oversubscribe_the_cores() {
        assert_eq!(device_threads_auto(1, 2), 1);
        assert_eq!(device_threads_auto(2, 2), 0);
        assert_eq!(device_threads_auto(4, 2), 0);
        assert_eq!(device_threads_auto(1, 1), 0);
        assert_eq!(device_threads_auto(7, 8), 1);
    }

    /// A front end on 2 cores runs a slow device on a thread of its own, a fast one inline.
    #[test]
    fn a_front_end_gives_a_slow_device_a_thread_even_without_a_spare_core() {
        assert_eq!(device_threads_for_front_end(2, 2, Some(55_000)), 1);
        assert_eq!(device_threads_for_front_end(2, 2, Some(4_000)), 0);
        assert_eq!(device_threads_for_front_end(2, 2, None), 0);
        assert_eq!(device_threads_for_front_end(2, 4, Some(4_000)), 1);
        let least = FRONT_END_DEVICE_THREAD_NS;
        assert_eq!(device_threads_for_front_end(2, 2, Some(least)), 1);
        assert_eq!(device_threads_for_front_end(2, 2, Some(least - 1)), 0);
    }

    #[test]
    fn names_round_trip_and_errors_list_choices() {
        for s in Stack::ALL {
            assert_eq!(s.name().parse::<Stack>().unwrap(), s);
        }
        for c in CompletionMode::ALL {
            assert_eq!(c.name().parse::<CompletionMode>().unwrap(), c);
        }
        assert_eq!(
            "fast".parse::<Stack>().unwrap_err(),
            "unknown stack \"fast\": expected one of baseline, nosched, atomic, spin"
        );
    }
}
